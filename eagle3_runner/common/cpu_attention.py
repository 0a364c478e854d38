"""An attention function for training speculators' EAGLE-3 draft on CPU.

speculators trains with ``simple_flex_attention`` (FlexAttention with a ``BlockMask``), and
FlexAttention has no backward on CPU.  This function takes the same ``BlockMask``, evaluates
its ``mask_mod`` densely over the actual query/key lengths (exact: the mask_mod alone defines
the causal + document + draft-diagonal mask for every key position, see speculators'
``create_combined_mask_mod``) and runs ``scaled_dot_product_attention``, which has a CPU
backward.  Registered in transformers' attention registry as :data:`NAME`.
"""

from __future__ import annotations

from typing import Any

NAME = "eagle3_dense_mask_sdpa"

# The last dense mask, with the mask_mod it came from (held, so that its id cannot be reused by
# another batch's mask_mod while cached).  Every decoder layer of one draft step reuses it.
_last: dict[str, Any] = {}


def _dense_mask(block_mask: Any, q_len: int, kv_len: int, device: Any) -> Any:
    from torch.nn.attention.flex_attention import create_mask

    key = (q_len, kv_len, str(device))
    if _last.get("mod") is block_mask.mask_mod and _last.get("key") == key:
        return _last["mask"]
    mask = create_mask(block_mask.mask_mod, None, None, q_len, kv_len, device=device)
    _last.update(mod=block_mask.mask_mod, key=key, mask=mask)
    return mask


def dense_mask_sdpa_forward(
    module: Any,  # noqa: ARG001
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    **_kwargs: Any,
) -> tuple[Any, None]:
    import torch.nn.functional as F  # noqa: N812

    mask = _dense_mask(attention_mask, query.shape[-2], key.shape[-2], query.device)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1]
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(NAME, dense_mask_sdpa_forward)
    return NAME


def attention_for(device: str) -> str:
    """The attention implementation the draft trains and evaluates with on ``device``."""
    return register() if device == "cpu" else "simple_flex_attention"
