"""Start the generator's workers safely whatever was imported first (fork poisoned by a CUDA query,
torch's thread pool shrunk before the fork).

``VllmHiddenStatesGenerator`` builds ``MultiprocExecutor`` itself, and vLLM forks its workers
unless CUDA is already initialized (``vllm/utils/system_utils.py`` ``_maybe_force_spawn``).  Two
things break that fork on a GPU (H200, vLLM 0.20.0, ``shared/notes/vllm-on-h200.md``,
2026-12-04): ``import speculators`` runs torch's default CUDA query (``torch._inductor`` asks
``torch.cuda.is_available()``), which poisons forks without initializing CUDA, so the worker
dies with "Cannot re-initialize CUDA in forked subprocess"; and with ``OMP_NUM_THREADS`` unset
vLLM calls ``torch.set_num_threads(1)`` before forking (``multiproc_executor.py``
``set_multiprocessing_worker_envs``), after which the capture threads in the worker fail with
"Invalid thread pool" and the driver's checks of the returned states run on one core.  The
vendored ``speculators/_vllm_compat_worker_start.py`` decides right before the executor is built:
``spawn`` when a forked probe finds torch's bad-fork flag set, and ``OMP_NUM_THREADS`` = cores
per worker on CUDA platforms; a caller's own settings are kept.  After the executor is built the
generator's process gets back the torch threads vLLM took from it (``set_torch_threads_for_runtime``
leaves the process that built the executor one thread; the generator's process checks and maps
every returned state).
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, ReplaceExpr, Shim, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.worker_start",
    title="choose the workers' start method and thread settings before MultiprocExecutor forks; keep the driver's threads",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.11.0"},
    after=("speculators.states_in_shared_memory",),  # both insert an import at the module's top
    why="A CUDA query before vLLM (import speculators does one) poisons the fork vLLM still "
        "makes, and vLLM's set_num_threads(1) before the fork breaks the worker's capture threads.",
    upstream="vLLM vllm/utils/system_utils.py _maybe_force_spawn (spawn only when CUDA is "
             "initialized); vllm/v1/executor/multiproc_executor.py set_multiprocessing_worker_envs "
             "(torch.set_num_threads(1) when OMP_NUM_THREADS is unset, GPU platforms).",
    remove_when="speculators builds its engine with vLLM's engine core (which starts its "
                "workers from a process that made no CUDA query), or vLLM spawns when a fork "
                "is poisoned.",
    shims=(Shim(source="worker_start.py", dest="speculators/_vllm_compat_worker_start.py"),),
    edits=(
        InsertAfter(
            GENERATOR, "", after="",
            new="from speculators._vllm_compat_worker_start import prepare_worker_start, restore_driver_threads",
        ),
        ReplaceExpr(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            old="MultiprocExecutor(vllm_config=self.vllm_config)",
            new="MultiprocExecutor(vllm_config=prepare_worker_start(self.vllm_config))",
        ),
        InsertAfter(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            after="self.executor = MultiprocExecutor(vllm_config=prepare_worker_start(self.vllm_config))",
            new="restore_driver_threads()",
        ),
    ),
), __name__)
