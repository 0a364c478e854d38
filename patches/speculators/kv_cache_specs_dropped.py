"""``get_kv_cache_config_from_groups`` no longer takes ``kv_cache_specs``.

vLLM 0.12.0 (``vllm/v1/core/kv_cache_utils.py``) dropped the ``kv_cache_specs`` parameter;
speculators 0.3.0 passes it and fails with ``TypeError: ... unexpected keyword argument
'kv_cache_specs'``.  Upstream removed it in 0.4.0 (commit e854faf1).
"""

from vllm_compat.catalog.patch import Patch, RemoveKeyword, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.kv_cache_specs_dropped",
    title="stop passing kv_cache_specs to get_kv_cache_config_from_groups",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.12.0"},
    why="get_kv_cache_config_from_groups rejects kv_cache_specs from vLLM 0.12.0 on.",
    upstream="vLLM 0.12.0: vllm/v1/core/kv_cache_utils.py get_kv_cache_config_from_groups "
             "(vllm_config, kv_cache_groups, available_memory).",
    remove_when="drop with speculators 0.3.x support (0.4.0 does not pass it).",
    edits=(
        RemoveKeyword(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            call="get_kv_cache_config_from_groups", keyword="kv_cache_specs",
        ),
    ),
), __name__)
