"""speculators 0.8/0.9 on vLLM 0.18: two requests of theirs are silently not honoured.

- Preprocessing renders prompts through vLLM's ``/v1/chat/completions/render`` with
  ``truncation_side="right"``; vLLM 0.18's request model has no such field and, being
  ``extra="allow"``, drops it: long conversations are truncated on vLLM's default side.
- hs-connectors 0.9.0 (pinned by speculators 0.9.0) quantizes to FP8 by overriding
  ``ExampleHiddenStatesConnector._write_tensors``; vLLM 0.18's connector has no such method and
  writes the file itself, so ``FP8HiddenStatesConnector`` writes bf16 without a word
  (``vllm-compat check`` names the override that overrides nothing).
"""

from vllm_compat.catalog.advisory import Advisory, register

register(Advisory(
    id="speculators_0_8_on_vllm_0_18",
    title="speculators 0.8/0.9 on vLLM 0.18: truncation_side ignored, the FP8 connector writes bf16",
    when={"speculators": ">=0.8,<0.10", "vllm": ">=0.18,<0.19"},
    why="speculators 0.8/0.9 send truncation_side to vLLM's render endpoint, which vLLM 0.18 does not know "
        "and silently drops (its request models allow extra fields); hs-connectors 0.9.0's "
        "FP8HiddenStatesConnector overrides ExampleHiddenStatesConnector._write_tensors, which vLLM 0.18 "
        "does not have, so it writes bf16 files without a word",
    upstream="vLLM 0.18.0: vllm/entrypoints/openai/chat_completion/protocol.py (no truncation_side) and "
             "example_hidden_states_connector.py (no _write_tensors); speculators 0.8.0 render_client.py",
    fix="upgrade vLLM (0.24.0 and later have both), or use speculators 0.7 with vLLM 0.18",
), __name__)
