"""``_prepare_4d_causal_attention_mask`` for speculators' EAGLE(-1) model on any transformers.

Vendored by vllm-compat as ``speculators/_vllm_compat_attn_mask.py``.  transformers 5.x (present
in 5.19, gone by 5.24) removed ``transformers.modeling_attn_mask_utils``; speculators 0.3.0 and
0.4.0 import ``_prepare_4d_causal_attention_mask`` from it at module level
(``speculators/models/eagle.py``), so ``import speculators`` fails.  Where transformers still has
the function it is used as is; otherwise this implements the only form speculators calls: a 2-D
padding mask ``[batch, key_len]`` turned into an additive causal 4-D mask
``[batch, 1, query_len, key_len]`` (0 where attending, dtype minimum elsewhere), with the optional
sliding window, exactly as transformers' ``AttentionMaskConverter.to_4d`` did.
"""

from __future__ import annotations

import torch

try:  # transformers < 5.2x
    from transformers.modeling_attn_mask_utils import (  # type: ignore[import-not-found]
        _prepare_4d_causal_attention_mask as _transformers_impl,
    )
except ImportError:
    _transformers_impl = None

__all__ = ["_prepare_4d_causal_attention_mask"]


def _prepare_4d_causal_attention_mask(
    attention_mask: torch.Tensor | None,
    input_shape,
    inputs_embeds: torch.Tensor,
    past_key_values_length: int,
    sliding_window: int | None = None,
):
    if _transformers_impl is not None:
        return _transformers_impl(
            attention_mask, input_shape, inputs_embeds, past_key_values_length,
            sliding_window=sliding_window,
        )
    return _causal_4d(attention_mask, input_shape, inputs_embeds, past_key_values_length, sliding_window)


def _causal_4d(attention_mask, input_shape, inputs_embeds, past_key_values_length, sliding_window=None):
    dtype, device = inputs_embeds.dtype, inputs_embeds.device
    batch, query_len = input_shape[0], input_shape[-1]
    key_len = query_len + past_key_values_length
    lowest = torch.finfo(dtype).min
    q = torch.arange(query_len, device=device)[:, None] + past_key_values_length
    k = torch.arange(key_len, device=device)[None, :]
    allowed = k <= q
    if sliding_window is not None:
        allowed = allowed & (k > q - sliding_window - 1)
    mask = torch.zeros(query_len, key_len, dtype=dtype, device=device).masked_fill(~allowed, lowest)
    mask = mask[None, None].expand(batch, 1, query_len, key_len)
    if attention_mask is None:
        return mask
    if attention_mask.dim() != 2:  # noqa: PLR2004 - speculators only passes 2-D masks
        raise ValueError(f"expected a 2-D attention mask, got shape {tuple(attention_mask.shape)}")
    padding = attention_mask[:, None, None, :].to(device) == 0
    return mask.masked_fill(padding, lowest)
