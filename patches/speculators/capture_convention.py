"""Capture convention: id ``i`` is the residual stream entering layer ``i``; id ``N`` is allowed.

A deliberate correction of upstream.  speculators captures ``hidden_states + residual`` AFTER
decoder layer ``i`` and accepts ids ``0 .. N-1`` (default ``[2, N//2, N-3, N-1]``).  vLLM's
EAGLE-3 serving path feeds the draft model the residual stream ENTERING the aux layers:
``LlamaModel.forward`` appends ``hidden_states + residual`` for ``idx in
self.aux_hidden_state_layers`` before it calls layer ``idx``
(``vllm/model_executor/models/llama.py``, 0.11.0-0.33.0; DeepseekV2 likewise from 0.18.0).
Upstream's training data is therefore one layer off from what the draft sees when served.

With ``speculators.capture_hooks`` (the vendored capture implements the convention), id ``i``
is the input of layer ``i`` and id ``N = num_hidden_layers`` the last layer's output before the
final norm.  This patch makes the generator's defaults and bounds match: default ids
``[2, N//2, N-3, N]`` (the same residual streams upstream meant, the last one now reachable),
and ids outside ``[0, N]`` are an error.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.capture_convention",
    title="layer ids name the residual stream entering each layer; default [2, N//2, N-3, N]",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.11.1"},
    after=("speculators.capture_hooks",),
    why="Upstream captured after layer i, one layer later than vLLM's EAGLE-3 serving path "
        "(aux_hidden_state_layers: the stream entering layer i).",
    upstream="vllm/model_executor/models/llama.py LlamaModel.forward aux_hidden_state_layers "
             "(every release); speculators custom_worker.py _patched_forward captures after "
             "the layer.",
    remove_when="speculators adopts vLLM's aux-hidden-state convention.",
    edits=(
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            old="self.layer_ids = [2, num_layers // 2, num_layers - 3, num_layers - 1]",
            new="self.layer_ids = [2, num_layers // 2, num_layers - 3, num_layers]",
        ),
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            old=(
                "if layer_id < 0 or layer_id >= num_layers:\n"
                "    raise ValueError(\n"
                '        f"Layer index {layer_id} out of bounds [0, {num_layers - 1}]"\n'
                "    )\n"
            ),
            new=(
                "if layer_id < 0 or layer_id > num_layers:\n"
                "    raise ValueError(\n"
                '        f"Layer index {layer_id} out of bounds [0, {num_layers}]"\n'
                "    )\n"
            ),
        ),
    ),
), __name__)
