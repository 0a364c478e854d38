"""``SchedulerConfig`` requires ``is_encoder_decoder`` (and ``max_model_len``).

vLLM 0.11.1 made ``is_encoder_decoder`` and ``max_model_len`` ``InitVar``s of
``SchedulerConfig`` (``vllm/config/scheduler.py``) with defaults; vLLM 0.12.0 removed the
defaults, so speculators 0.3.0's ``SchedulerConfig(max_num_seqs=..., max_model_len=...,
max_num_batched_tokens=...)`` fails pydantic validation ("is_encoder_decoder Field
required").  ``max_model_len`` is already passed; add ``is_encoder_decoder=False`` as
upstream did in 0.4.0 (commit e854faf1).
"""

from vllm_compat.catalog.patch import AddKeyword, Patch, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.scheduler_config_is_encoder_decoder",
    title="pass is_encoder_decoder=False to SchedulerConfig",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.12.0"},
    why="SchedulerConfig.is_encoder_decoder has no default from vLLM 0.12.0 on "
        "(ValidationError: Field required).",
    upstream="vLLM 0.12.0: vllm/config/scheduler.py SchedulerConfig is_encoder_decoder / "
             "max_model_len InitVars lose their defaults (added with defaults in 0.11.1).",
    remove_when="drop with speculators 0.3.x support (0.4.0 passes it).",
    edits=(
        AddKeyword(
            GENERATOR, "VllmHiddenStatesGenerator._create_vllm_config",
            call="SchedulerConfig", keyword="is_encoder_decoder", value="False",
        ),
    ),
), __name__)
