"""Hand the captured states to the driver through shared memory instead of pickling them.

With ``speculators.capture_hooks`` the worker already copies each request's rows into host
memory while the steps run.  What was left of upstream's way cost ~97% of the prefill
throughput on an H200 (3,671 of 169,398 tokens/s, 8-layer Llama-3-8B-width model): at the end
of each batch ``_get_captured_states`` returns every state of every request through
``collective_rpc``, i.e. pickled by ``MultiprocExecutor``'s message queue
(``vllm/v1/executor/multiproc_executor.py``; its shared-memory ring takes only small messages,
larger ones go through a socket) and unpickled in the driver, and then ``generate`` copies
each one again (``h.clone().cpu()``).  The engine waits for all of it.

Fix: the capture's sink becomes ``SharedStatesWriter`` (``speculators/_vllm_compat_shared_states.py``):
in the capture's worker threads, while the next steps run, each finished request's states are
written from the pinned host buffer into one ``/dev/shm`` file per layer, and
``_get_captured_states`` returns only ``(path, dtype, shape)`` descriptors.  The generator maps
each file (``receive_states``: ``torch.from_file(shared=True)``, no copy) and unlinks it at
once, so every tensor owns its memory, freed with it; ``h.clone().cpu()`` becomes ``h`` (the
tensors are already fresh CPU tensors that nothing else holds).  ``generate``'s signature and
return value are untouched: per prompt, in input order, ``{"input_ids": LongTensor[T],
"hidden_states": [Tensor[T, H] per layer id], "loss_mask": None}`` with CPU tensors in the
model's dtype.  Tensor parallelism as before: only TP rank 0 captures and answers
(``unique_reply_rank=0``).  Without room in ``/dev/shm`` a request's tensors travel the old way.
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, ReplaceExpr, Shim, register

WORKER = "speculators/data_generation/custom_worker.py"
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
RPC = 'self.executor.collective_rpc("_get_captured_states", unique_reply_rank=0)'

register(Patch(
    id="speculators.states_in_shared_memory",
    title="hand captured states to the driver through shared memory, not pickled through collective_rpc",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.11.1"},
    after=("speculators.capture_hooks", "speculators.request_attribution"),
    why="Every captured state pickled through collective_rpc, unpickled and cloned in the driver "
        "while the engine waits: 2.2% of plain prefill tokens/s on an H200.",
    upstream="speculators 0.3.0/0.4.0 vllm_hidden_states_generator.py generate "
             "(collective_rpc('_get_captured_states'), h.clone().cpu()); vLLM "
             "vllm/v1/executor/multiproc_executor.py MultiprocExecutor.collective_rpc (pickled replies).",
    remove_when="speculators moves captured states without pickling them through collective_rpc "
                "(upstream's 0.5.0 rewrite captures through vLLM's own serving path).",
    shims=(Shim(source="shared_states.py", dest="speculators/_vllm_compat_shared_states.py"),),
    edits=(
        InsertAfter(
            WORKER, "", after="from speculators._vllm_compat_generator_capture import HiddenStatesCapture",
            new="from speculators._vllm_compat_shared_states import SharedStatesWriter",
        ),
        # an insertion, not a rewrite of capture_hooks' statement: capture_hooks must still find
        # its own result when the catalog is applied again (every edit a fixed point)
        InsertAfter(
            WORKER, "HiddenStatesWorkerExtension._setup_hidden_states_capture",
            after="self._vllm_compat_capture = HiddenStatesCapture.install(self, layer_ids)",
            new="self._vllm_compat_capture.set_sink(SharedStatesWriter())",
        ),
        InsertAfter(GENERATOR, "", after="", new="from speculators._vllm_compat_shared_states import receive_states"),
        ReplaceExpr(GENERATOR, "VllmHiddenStatesGenerator.generate", old=RPC, new=f"receive_states({RPC})"),
        ReplaceExpr(GENERATOR, "VllmHiddenStatesGenerator.generate", old="h.clone().cpu()", new="h"),
    ),
), __name__)
