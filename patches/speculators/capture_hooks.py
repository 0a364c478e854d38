"""Capture hidden states with hooks on the decoder layers, per request, in vLLM's own forward.

speculators' worker extension replaces the base model's ``forward`` by a copy
(``_patched_forward`` in ``custom_worker.py``) that re-implements the layer loop, and
attributes the captured rows to requests by position in the batch.  Both drift with vLLM:

* the copied loop omits what vLLM's model forwards gained: ``DeepseekV2Model.forward`` passes
  ``llama_4_scaling`` to every layer from vLLM 0.12.0 and all-gathers hidden states/residual
  for sequence-parallel MoE layers from 0.25.0 (``vllm/model_executor/models/deepseek_v2.py``);
  ``LlamaModel.forward`` passes ``**extra_layer_kwargs`` from 0.15.0.  The copy silently
  computes something else for such models.
* Model Runner V2 (``vllm/v1/worker/gpu/model_runner.py``; default for some architectures from
  0.22.0 and for everything from 0.29.0 on GPU) has no ``input_batch`` (0.4.0's
  ``_store_captured_states`` raises AttributeError) and orders each step's requests by
  scheduled-token count (``sort_batch_req_ids``), so batch position is not input order.
* 0.3.0 slices one concatenation of all steps by prompt length in input order, which is
  wrong as soon as vLLM reorders requests or chunks a prefill (chunked prefill is on by
  default from 0.11.1).

Fix: a vendored capture (``speculators/_vllm_compat_capture.py``, the mechanism
``eagle3_runner``'s fast path uses too, with its parts ``_vllm_compat_runner_layout.py`` and
``_vllm_compat_host_memory.py``, and ``speculators/_vllm_compat_generator_capture.py``, the
extension's API on it) registers forward pre-hooks on the decoder layers (a forward hook
on the last layer for id ``N``), so vLLM's own forward runs unchanged on every architecture,
and splits each step's rows per request with the runner's own layout of that step (Model
Runner V2: the step's ``InputBatch.req_ids`` / ``query_start_loc_np``; V1 runner:
``input_batch.req_ids`` with the scheduled token counts), placed at each request's
``num_computed_tokens`` offset (decode rows dropped).  Hooks record only inside a real
``execute_model`` step (never in profiling or warm-up runs).  Each request's rows are copied
into its own host buffer (pinned, on a side CUDA stream) as the steps run; the captured token
ids and positions are checked against the prompt (an attribution error raises instead of
returning wrong rows).  ``_get_captured_states`` returns ``{request id: [CPU tensor per layer
id]}`` in the order of the requested layer ids (upstream: ascending unique ids; identical for
the defaults).  The generator fetches it with the executor's own ``collective_rpc``
(``MultiprocExecutor``: pickled through its shared-memory queue), which keeps tensors nested in
a dict intact; ``LLM.collective_rpc``'s msgpack hop would turn them into placeholders.
``speculators.states_in_shared_memory`` then takes the pickling out of that hop.

Capture convention (a deliberate correction, see also ``speculators.capture_convention``): for
layer id ``i`` the residual stream ENTERING decoder layer ``i`` (``hidden_states + residual`` as
passed to layer ``i``), for id ``N = num_hidden_layers`` the last layer's output before the
final norm.  Upstream captured AFTER layer ``i``, one layer later than what vLLM's EAGLE-3
serving path feeds the draft model: ``LlamaModel.forward`` appends ``hidden_states + residual``
for ``idx in self.aux_hidden_state_layers`` BEFORE calling layer ``idx``
(``vllm/model_executor/models/llama.py``, every release 0.11.0-0.33.0).
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, ReplaceDef, ReplaceStmt, Shim, register

WORKER = "speculators/data_generation/custom_worker.py"

RESET = '''
def _reset_capture(self):
    """Reset captured states before starting a new batch"""
    if not hasattr(self, "_layer_ids"):
        raise RuntimeError(
            "Must call _setup_hidden_states_capture before capturing states"
        )
    self._vllm_compat_capture.reset()
'''

GET = '''
def _get_captured_states(self):
    """{request id: [tensor per requested layer id]}, or None if nothing was captured."""
    return self._vllm_compat_capture.collect()
'''

register(Patch(
    id="speculators.capture_hooks",
    title="capture with decoder-layer hooks, per request, instead of a copied model forward",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.11.1"},
    why="The copied model forward drifts from vLLM's (DeepseekV2 llama_4_scaling, SP-MoE "
        "gather) and the batch-position attribution breaks under Model Runner V2 (no "
        "input_batch, requests sorted per step) and under reordering/chunked prefill.",
    upstream="vLLM 0.12.0 deepseek_v2.py DeepseekV2DecoderLayer.forward(..., llama_4_scaling); "
             "0.25.0 DeepseekV2Model.forward SP-MoE all-gather; 0.22.0/0.29.0 "
             "vllm/v1/worker/gpu/model_runner.py (Model Runner V2, sort_batch_req_ids).",
    remove_when="speculators captures through vLLM's own aux_hidden_state_layers / hooks "
                "(upstream moved to vllm_client/offline in 0.5.0).",
    shims=(
        Shim(source="capture.py", dest="speculators/_vllm_compat_capture.py"),
        Shim(source="runner_layout.py", dest="speculators/_vllm_compat_runner_layout.py"),
        Shim(source="host_memory.py", dest="speculators/_vllm_compat_host_memory.py"),
        Shim(source="generator_capture.py", dest="speculators/_vllm_compat_generator_capture.py"),
    ),
    edits=(
        InsertAfter(
            WORKER, "", after="",
            new="from speculators._vllm_compat_generator_capture import HiddenStatesCapture",
        ),
        ReplaceStmt(
            WORKER, "HiddenStatesWorkerExtension._setup_hidden_states_capture",
            old=(
                "base_model._extension = self\n"
                "base_model.forward = types.MethodType(_patched_forward, base_model)\n"
            ),
            new="self._vllm_compat_capture = HiddenStatesCapture.install(self, layer_ids)",
        ),
        ReplaceDef(WORKER, "HiddenStatesWorkerExtension._reset_capture", new=RESET),
        ReplaceDef(WORKER, "HiddenStatesWorkerExtension._get_captured_states", new=GET),
    ),
), __name__)
