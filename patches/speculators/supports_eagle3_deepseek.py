"""speculators 0.3.0 rejects DeepseekV2/V3 models before vLLM 0.18.0.

0.3.0's ``_setup_hidden_states_capture`` refuses models for which
``supports_eagle3(model)`` is false.  ``DeepseekV2ForCausalLM`` (also used for DeepSeek-V3)
only implements ``SupportsEagle3`` from vLLM 0.18.0
(``vllm/model_executor/models/deepseek_v2.py``), so extraction from DeepSeek-class verifiers
fails on 0.11.1-0.17.x although the capture (``speculators.capture_hooks``) works for them.
Upstream dropped the check in 0.4.0 (commit e854faf1); here DeepseekV2/V3 are accepted too.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

WORKER = "speculators/data_generation/custom_worker.py"

register(Patch(
    id="speculators.supports_eagle3_deepseek",
    title="accept DeepseekV2/V3 before vLLM declares SupportsEagle3 for them (0.3.0)",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.11.1,<0.18.0"},
    why="supports_eagle3() is false for DeepseekV2ForCausalLM before vLLM 0.18.0, so 0.3.0 "
        "refuses DeepSeek-V2/V3 verifiers.",
    upstream="vLLM 0.18.0: vllm/model_executor/models/deepseek_v2.py DeepseekV2ForCausalLM "
             "gains SupportsEagle3.",
    remove_when="drop with vLLM < 0.18 or speculators 0.3.x support.",
    edits=(
        ReplaceStmt(
            WORKER, "HiddenStatesWorkerExtension._setup_hidden_states_capture",
            old=(
                "if not supports_eagle3(model):\n"
                "    raise ValueError(\n"
                '        f"Model {type(model).__name__} does not support hidden state extraction"\n'
                "    )\n"
            ),
            new=(
                "if not supports_eagle3(model) and type(model).__name__ not in (\n"
                '    "DeepseekV2ForCausalLM",\n'
                '    "DeepseekV3ForCausalLM",\n'
                "):\n"
                "    raise ValueError(\n"
                '        f"Model {type(model).__name__} does not support hidden state extraction"\n'
                "    )\n"
            ),
        ),
    ),
), __name__)
