"""KV-cache planning functions moved to ``kv_cache_planning``; ``set_kv_cache_layout`` grew.

vLLM 0.33.0 moved ``get_kv_cache_config_from_groups``, ``_get_kv_cache_groups_uniform_spec``
and ``unify_hybrid_kv_cache_specs`` from ``vllm/v1/core/kv_cache_utils.py`` to the new
``vllm/v1/core/kv_cache_planning.py`` with no re-export (``get_request_block_hasher`` and
``init_none_hash`` stay): ``import speculators.data_generation...`` fails with ImportError.
The same release made ``Executor.set_kv_cache_layout(layout_name,
cp_kv_cache_interleave_size)`` take a second required argument
(``vllm/v1/executor/abstract.py``; the engine core passes
``parallel_config.cp_kv_cache_interleave_size``).

Fix: the generator imports the KV-cache helpers (those of ``speculators.kv_cache_groups`` and
``speculators.scheduler_block_size_groups`` too) from a vendored module
(``speculators/_vllm_compat_kv_cache.py``, vendored only for vLLM >= 0.33.0) that takes each
from where 0.33.0 defines it, and passes the interleave size to ``set_kv_cache_layout``.
"""

from vllm_compat.catalog.patch import Patch, ReplaceExpr, Shim, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.kv_cache_planning",
    title="import KV-cache planning from kv_cache_planning; two-argument set_kv_cache_layout",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.33.0"},
    after=("speculators.kv_cache_layout", "speculators.kv_cache_groups",
           "speculators.scheduler_block_size_groups"),
    why="vLLM 0.33.0 moved the KV-cache planning functions (ImportError) and added a required "
        "cp_kv_cache_interleave_size to Executor.set_kv_cache_layout.",
    upstream="vLLM 0.33.0: vllm/v1/core/kv_cache_planning.py (new; no re-export from "
             "kv_cache_utils.py); vllm/v1/executor/abstract.py set_kv_cache_layout(layout_name, "
             "cp_kv_cache_interleave_size).",
    remove_when="speculators builds its engine with vLLM's engine core.",
    shims=(Shim(source="kv_cache.py", dest="speculators/_vllm_compat_kv_cache.py"),),
    edits=(
        ReplaceExpr(
            GENERATOR, "",
            old="vllm.v1.core.kv_cache_utils",
            new="speculators._vllm_compat_kv_cache",
        ),
        ReplaceExpr(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            old="self.executor.set_kv_cache_layout(layout.name)",
            new=(
                "self.executor.set_kv_cache_layout(\n"
                "    layout.name,\n"
                "    self.vllm_config.parallel_config.cp_kv_cache_interleave_size,\n"
                ")"
            ),
        ),
    ),
), __name__)
