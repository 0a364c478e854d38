"""The KV-cache layout must be resolved before the KV-cache config is built.

From vLLM 0.29.0 ``get_kv_cache_config_from_groups`` reads
``cache_config.get_resolved_kv_cache_layout()``, which raises "KV cache layout has not been
resolved yet; it is resolved once by the engine core (resolve_kv_cache_layout) ..."
(``vllm/config/cache.py``).  The engine core (``EngineCore._initialize_kv_caches``) resolves it
from the workers' supported layouts, publishes it to the workers
(``Executor.set_kv_cache_layout``, new in 0.29.0), and stamps it on every
``KVCacheConfig``.  The generator builds its KV cache by hand, so it does the same, before
sizing memory (as the engine core does: workers may use the layout while profiling).
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

# the statement speculators.worker_block_size inserts after the KV-cache groups are built
SYNC = (
    "self.vllm_config.cache_config.block_size = min("
    "group.kv_cache_spec.block_size for group in kv_cache_groups)"
)

register(Patch(
    id="speculators.kv_cache_layout",
    title="resolve and publish the KV-cache layout before building the KV-cache config",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.29.0"},
    after=("speculators.worker_block_size",),
    why="From vLLM 0.29.0 get_kv_cache_config_from_groups raises ValueError until the KV "
        "cache layout is resolved.",
    upstream="vLLM 0.29.0: vllm/config/cache.py get_resolved_kv_cache_layout; "
             "vllm/v1/attention/backends/utils.py resolve_kv_cache_layout; "
             "vllm/v1/executor/abstract.py set_kv_cache_layout / get_supported_kv_cache_layouts.",
    remove_when="speculators builds its engine with vLLM's engine core.",
    edits=(
        InsertAfter(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            after=SYNC,
            new=(
                "from vllm.v1.attention.backends.utils import resolve_kv_cache_layout\n"
                "layout = resolve_kv_cache_layout(\n"
                "    self.vllm_config,\n"
                "    self.executor.get_supported_kv_cache_layouts(),\n"
                "    list(kv_cache_spec.values()),\n"
                ")\n"
                "self.executor.set_kv_cache_layout(layout.name)\n"
            ),
        ),
        InsertAfter(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            after="self.vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks",
            new="kv_cache_config.kv_cache_layout = self.vllm_config.cache_config.kv_cache_layout",
        ),
    ),
), __name__)
