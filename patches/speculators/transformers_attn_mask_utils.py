"""``transformers.modeling_attn_mask_utils`` is gone in newer transformers 5.x.

speculators 0.3.0 and 0.4.0 import ``_prepare_4d_causal_attention_mask`` from
``transformers.modeling_attn_mask_utils`` at module level in ``speculators/models/eagle.py``;
``speculators/models/__init__.py`` imports that module and ``speculators/__init__.py`` loads
the model registry at import time, so with transformers 5.24 (present in 5.19) ``import
speculators`` fails with ``ModuleNotFoundError`` before the EAGLE-3 pipeline is reached.  vLLM
0.27-0.32 accept such a transformers (``transformers>=5.5.3``, no upper bound), so a fresh
install gets it.  Fix: import the function from a vendored module that uses transformers' own
implementation where it exists and otherwise reimplements the 2-D -> causal 4-D case
speculators uses.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, Shim, register

EAGLE = "speculators/models/eagle.py"

register(Patch(
    id="speculators.transformers_attn_mask_utils",
    title="import _prepare_4d_causal_attention_mask from a vendored fallback",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    why="`import speculators` fails once transformers drops modeling_attn_mask_utils "
        "(observed with transformers 5.24.0, which vLLM 0.27-0.32 allow).",
    upstream="transformers 5.2x: transformers/modeling_attn_mask_utils.py removed (present in "
             "5.19.0, absent in 5.24.0); speculators/models/eagle.py imports it at module level.",
    remove_when="speculators stops importing transformers.modeling_attn_mask_utils.",
    shims=(Shim(source="attn_mask.py", dest="speculators/_vllm_compat_attn_mask.py"),),
    edits=(
        ReplaceStmt(
            EAGLE, "",
            old="from transformers.modeling_attn_mask_utils import _prepare_4d_causal_attention_mask",
            new="from speculators._vllm_compat_attn_mask import _prepare_4d_causal_attention_mask",
        ),
    ),
), __name__)
