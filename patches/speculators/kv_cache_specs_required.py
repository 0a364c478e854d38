"""``get_kv_cache_config_from_groups`` still requires ``kv_cache_specs`` before vLLM 0.12.0.

speculators 0.4.0 was written for vLLM >= 0.12.0 and calls
``get_kv_cache_config_from_groups(vllm_config=..., kv_cache_groups=..., available_memory=...)``;
on vLLM 0.11.0-0.11.2 (``vllm/v1/core/kv_cache_utils.py``) the function still requires
``kv_cache_specs``: TypeError (missing argument).  Pass it there.
"""

from vllm_compat.catalog.patch import AddKeyword, Patch, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.kv_cache_specs_required",
    title="pass kv_cache_specs to get_kv_cache_config_from_groups on vLLM < 0.12",
    target="speculators",
    target_versions=">=0.4.0,<0.5",
    requires={"vllm": "<0.12.0"},
    why="On vLLM 0.11.0-0.11.2 get_kv_cache_config_from_groups requires kv_cache_specs, "
        "which speculators 0.4.0 omits.",
    upstream="vLLM 0.11.x: vllm/v1/core/kv_cache_utils.py get_kv_cache_config_from_groups"
             "(vllm_config, kv_cache_groups, kv_cache_specs, available_memory); dropped in 0.12.0.",
    remove_when="drop with vLLM 0.11.x support.",
    edits=(
        AddKeyword(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            call="get_kv_cache_config_from_groups", keyword="kv_cache_specs",
            value="kv_cache_spec",
        ),
    ),
), __name__)
