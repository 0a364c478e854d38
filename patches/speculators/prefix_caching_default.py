"""Prefix caching is on by default: turn it off for extraction.

vLLM 0.12.0 changed ``CacheConfig.enable_prefix_caching`` (``vllm/config/cache.py``) from
``None`` (off) to ``True``.  speculators 0.3.0 builds its ``Request``s without a block hasher,
so the block pool's ``assert len(request.block_hashes) >= num_full_blocks``
(``vllm/v1/core/block_pool.py``) trips as soon as a prompt fills a block; and with a hasher,
repeated prefixes would skip the forward pass and the capture would see no tokens for them.
Upstream 0.4.0 passes ``enable_prefix_caching=False``; do the same for 0.3.0.
"""

from vllm_compat.catalog.patch import AddKeyword, Patch, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.prefix_caching_default",
    title="disable prefix caching in the generator's CacheConfig",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.12.0"},
    why="Prefix caching is on by default from vLLM 0.12.0; cached prefixes skip the forward "
        "pass (no hidden states) and 0.3.0's requests carry no block hasher (assertion).",
    upstream="vLLM 0.12.0: vllm/config/cache.py CacheConfig.enable_prefix_caching defaults "
             "to True.",
    remove_when="drop with speculators 0.3.x support (0.4.0 disables it).",
    edits=(
        AddKeyword(
            GENERATOR, "VllmHiddenStatesGenerator._create_vllm_config",
            call="CacheConfig", keyword="enable_prefix_caching", value="False",
        ),
    ),
), __name__)
