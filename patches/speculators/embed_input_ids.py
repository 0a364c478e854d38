"""``get_input_embeddings`` was renamed ``embed_input_ids``.

vLLM 0.11.1 (``vllm/model_executor/models/llama.py``, ``deepseek_v2.py`` and the other model
files) renamed the base models' ``get_input_embeddings(input_ids)`` to
``embed_input_ids(input_ids)``; speculators 0.3.0's copied forward (``_patched_forward`` in
``custom_worker.py``) still calls the old name: AttributeError on the first forward.  With
``speculators.capture_hooks`` the copied forward is no longer installed, but it stays in the
file, so it is kept correct for the vLLM it runs against.  (0.4.0 already uses the new name.)
"""

from vllm_compat.catalog.patch import Patch, ReplaceExpr, register

WORKER = "speculators/data_generation/custom_worker.py"

register(Patch(
    id="speculators.embed_input_ids",
    title="call embed_input_ids instead of get_input_embeddings",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.11.1"},
    why="The base models have no get_input_embeddings from vLLM 0.11.1 on (AttributeError).",
    upstream="vLLM 0.11.1: vllm/model_executor/models/llama.py LlamaModel.embed_input_ids "
             "(get_input_embeddings removed), same for DeepseekV2Model.",
    remove_when="drop with speculators 0.3.x support (0.4.0 uses embed_input_ids).",
    edits=(
        ReplaceExpr(
            WORKER, "_patched_forward",
            old="self.get_input_embeddings(input_ids)",
            new="self.embed_input_ids(input_ids)",
        ),
    ),
), __name__)
