"""speculators 0.3.0 calls ``torch.cuda.mem_get_info()`` unconditionally.

On a machine without CUDA (vLLM's CPU build; other accelerators) ``torch.cuda.mem_get_info()``
raises ("Torch not compiled with CUDA enabled").  0.4.0 replaced it with an
accelerator-agnostic ``mem_get_info()`` that returns ``(0, 0)`` without an accelerator; do the
same here (``(0, 0)`` without CUDA) and let ``speculators.cpu_memory_fallback`` ask vLLM for
the KV-cache budget in that case.
"""

from vllm_compat.catalog.patch import Patch, ReplaceExpr, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.cuda_mem_get_info",
    title="do not call torch.cuda.mem_get_info without CUDA (0.3.0)",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    why="torch.cuda.mem_get_info() raises where CUDA is absent (vLLM CPU build).",
    upstream="speculators 0.3.0 vllm_hidden_states_generator.py __init__ (CUDA-only call; "
             "0.4.0 uses speculators.utils.util.mem_get_info).",
    remove_when="drop with speculators 0.3.x support.",
    edits=(
        ReplaceExpr(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            old="torch.cuda.mem_get_info()",
            new="torch.cuda.mem_get_info() if torch.cuda.is_available() else (0, 0)",
        ),
    ),
), __name__)
