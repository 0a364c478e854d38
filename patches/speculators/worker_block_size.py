"""Use the KV block size vLLM resolves, not a hard-coded 16.

The generator forces ``CacheConfig(block_size=16)`` (``VLLM_BLOCK_SIZE``) and gives the same
constant to the ``Scheduler``.  Attention backends constrain the block size: vLLM's CPU
attention needs a multiple of 32 and the worker fails with "No common block size for 16"
(``vllm/v1/worker/utils.py``); vLLM picks 128 on CPU (``vllm/platforms/cpu.py``), 16 on CUDA,
and MLA/hybrid models may differ again.  vLLM's own engine core never hard-codes it: it lets
the platform choose and then takes the block size from the KV-cache groups the workers report
(``EngineCore._initialize_kv_caches``: ``cache_config.block_size = min(group block sizes)``,
then ``Scheduler(block_size=...)``).

Fix, as the engine core does it: stop passing ``block_size`` to ``CacheConfig``; after the
KV-cache groups are known set ``cache_config.block_size`` from the workers' specs; give that
to the ``Scheduler`` (and, in 0.4.0, to the block hasher, which already reads it).
"""

from vllm_compat.catalog.patch import AddKeyword, InsertAfter, Patch, RemoveKeyword, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

SYNC = (
    "self.vllm_config.cache_config.block_size = min(\n"
    "    group.kv_cache_spec.block_size for group in kv_cache_groups\n"
    ")\n"
)

register(Patch(
    id="speculators.worker_block_size",
    title="use the block size the workers report instead of a hard-coded 16",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.11.1"},
    after=("speculators.scheduler_block_size",),
    why="A hard-coded block size of 16 fails on backends that need another size (CPU "
        "attention: multiples of 32, 'No common block size'); vLLM resolves it per platform "
        "and backend.",
    upstream="vLLM CPU platform (vllm/platforms/cpu.py check_and_update_config, block_size "
             "128; vllm/v1/worker/utils.py select kernel block size); the engine core takes "
             "the block size from the KV-cache groups (vllm/v1/engine/core.py "
             "_initialize_kv_caches).",
    remove_when="speculators stops hard-coding VLLM_BLOCK_SIZE (not fixed in 0.4.0).",
    edits=(
        RemoveKeyword(
            GENERATOR, "VllmHiddenStatesGenerator._create_vllm_config",
            call="CacheConfig", keyword="block_size",
        ),
        InsertAfter(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            after="kv_cache_groups = _get_kv_cache_groups_uniform_spec(kv_cache_spec)",
            new=SYNC,
        ),
        RemoveKeyword(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            call="Scheduler", keyword="block_size",
        ),
        AddKeyword(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            call="Scheduler", keyword="block_size",
            value="self.vllm_config.cache_config.block_size",
        ),
    ),
), __name__)
