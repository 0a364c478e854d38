"""The scheduler's block size for several KV-cache groups.

``speculators.worker_block_size`` gives the ``Scheduler`` the smallest group block size, which
is the engine core's value for one group.  With several groups (a hybrid model grouped by
``speculators.kv_cache_groups``: attention and mamba-state groups, or sliding-window and full
attention) the scheduler's token alignment must be a multiple of every group's block size:
vLLM's engine core passes ``resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)``
(the LCM of the groups' block sizes, and the hash block size) to ``Scheduler(block_size=...,
hash_block_size=...)`` (``vllm/v1/engine/core.py`` ``EngineCore.__init__``, from vLLM 0.20.0;
``vllm/v1/core/kv_cache_utils.py``).  For one group the function returns the block size the
generator already passes, so single-group models schedule exactly as before.

Fix: the generator resolves both sizes the same way and gives them to the ``Scheduler``.
"""

from vllm_compat.catalog.patch import AddKeyword, InsertAfter, Patch, RemoveKeyword, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.scheduler_block_size_groups",
    title="resolve the scheduler's block sizes for several KV-cache groups",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.29.0"},  # with speculators.kv_cache_groups (several groups)
    after=("speculators.worker_block_size", "speculators.kv_cache_groups", "speculators.kv_cache_layout"),
    why="With several KV-cache groups (hybrid models) the scheduler needs the LCM of the groups' "
        "block sizes, not the smallest one; vLLM's engine core resolves it with "
        "resolve_kv_cache_block_sizes.",
    upstream="vLLM 0.20.0: vllm/v1/core/kv_cache_utils.py resolve_kv_cache_block_sizes, "
             "vllm/v1/engine/core.py Scheduler(block_size=scheduler_block_size, "
             "hash_block_size=hash_block_size).",
    remove_when="speculators builds its scheduler with vLLM's engine core; not fixed in 0.4.0.",
    edits=(
        InsertAfter(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            after="self.vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks",
            # from kv_cache_groups' shim: speculators.kv_cache_planning rewrites the vLLM module path
            # in the generator, and this insertion is recognised by its first statement
            new=("from speculators._vllm_compat_kv_groups import resolve_kv_cache_block_sizes\n"
                 "scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(\n"
                 "    kv_cache_config, self.vllm_config\n"
                 ")\n"),
        ),
        # hash_block_size first: block_size is then re-added last, so a second pass writes the same
        # keyword order (a fixed point)
        AddKeyword(GENERATOR, "VllmHiddenStatesGenerator.__init__", call="Scheduler", keyword="hash_block_size",
                   value="hash_block_size"),
        RemoveKeyword(GENERATOR, "VllmHiddenStatesGenerator.__init__", call="Scheduler", keyword="block_size"),
        AddKeyword(GENERATOR, "VllmHiddenStatesGenerator.__init__", call="Scheduler", keyword="block_size",
                   value="scheduler_block_size"),
    ),
), __name__)
