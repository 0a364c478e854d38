"""``Request(...)`` no longer takes ``eos_token_id``.

vLLM 0.17.0 (``vllm/v1/request.py``, ``Request.__init__``) dropped the parameter: the stop token
now comes from the sampling parameters.  speculators 0.3.0 and 0.4.0 pass it and fail with
``TypeError: Request.__init__() got an unexpected keyword argument 'eos_token_id'``.  The
generator only prefills (max_tokens=1), so the stop token never matters here.
"""

from vllm_compat.catalog.patch import Patch, RemoveKeyword, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.request_eos_token_id",
    title="stop passing eos_token_id to Request",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.17.0"},
    why="Request.__init__ rejects the eos_token_id keyword from vLLM 0.17.0 on.",
    upstream="vLLM 0.17.0: vllm/v1/request.py Request.__init__ drops eos_token_id.",
    remove_when="speculators stops passing eos_token_id (fixed upstream after 0.4.0).",
    edits=(
        RemoveKeyword(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            call="Request",
            keyword="eos_token_id",
        ),
    ),
), __name__)
