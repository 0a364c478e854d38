"""An attention function for training speculators' EAGLE-3 draft on CPU.

speculators trains with ``simple_flex_attention`` (FlexAttention with a ``BlockMask``), and
FlexAttention has no backward on CPU.  This function takes the same ``BlockMask``, evaluates
its ``mask_mod`` densely over the actual query/key lengths (exact: the mask_mod alone defines
the causal + document + draft-diagonal mask for every key position, see speculators'
``create_combined_mask_mod``) and runs ``scaled_dot_product_attention``, which has a CPU
backward.  Registered in transformers' attention registry as :data:`NAME`.

Packed batches hold several documents, and a row's keys (in every draft step's block of keys)
lie in its own document, so the rows are cut where no allowed key crosses (read off the mask,
whatever its mask_mod) and each group of rows attends to its own keys only: the same result,
without scoring every row against the whole batch.  At SmolLM2-135M's draft shape (2,048-token
batches of 7 documents, 2 CPU cores) the three draft steps' attention, forward and backward,
take 0.56 s instead of 2.1 s (``benchmarks/cpu_attention.py``), a training step 2.5 s instead
of 4.3 s.
"""

from __future__ import annotations

from typing import Any

NAME = "eagle3_dense_mask_sdpa"

# The last dense mask, with the mask_mod it came from (held, so that its id cannot be reused by
# another batch's mask_mod while cached).  Every decoder layer of one draft step reuses it.
_last: dict[str, Any] = {}


MIN_GROUP_ROWS = 128  # consecutive documents are merged up to this many rows: fewer, larger calls


def _dense_mask(block_mask: Any, q_len: int, kv_len: int, device: Any) -> tuple[Any, list[tuple[int, int, Any]]]:
    """The dense mask and its row groups (:func:`row_groups`), cached for the draft step's layers."""
    from torch.nn.attention.flex_attention import create_mask

    key = (q_len, kv_len, str(device))
    if _last.get("mod") is block_mask.mask_mod and _last.get("key") == key:
        return _last["mask"], _last["groups"]
    mask = create_mask(block_mask.mask_mod, None, None, q_len, kv_len, device=device)
    groups = row_groups(mask, q_len, kv_len)
    _last.update(mod=block_mask.mask_mod, key=key, mask=mask, groups=groups)
    return mask, groups


def row_groups(mask: Any, q_len: int, kv_len: int, min_rows: int = MIN_GROUP_ROWS) -> list[tuple[int, int, Any]]:
    """``[(start, end, key_index), ...]``: consecutive row ranges ``[start, end)`` such that
    every key allowed to a row of a range is in its ``key_index``: the range's own positions in
    each of the ``kv_len // q_len`` blocks of keys.  Cut only where no allowed key of a row before
    the cut lies at or after it (within its block) and none after it lies before it; ranges
    shorter than ``min_rows`` are merged with a neighbour.  One group (all keys) when the keys are
    not whole blocks (``key_index`` None)."""
    import torch

    if kv_len % q_len or q_len <= min_rows:
        return [(0, q_len, None)]
    allowed = mask.reshape(-1, q_len, kv_len // q_len, q_len).any(dim=2).any(dim=0)  # row -> key (in-block)
    rows = torch.arange(q_len, device=allowed.device)
    lo = torch.minimum(torch.where(allowed, rows, q_len).amin(dim=1), rows)
    hi = torch.maximum(torch.where(allowed, rows, -1).amax(dim=1), rows)
    reach = torch.cummax(hi, dim=0).values  # the furthest key of any row up to r
    back = torch.flip(torch.cummin(torch.flip(lo, (0,)), dim=0).values, (0,))  # the nearest key of any row from r
    cuts = ((reach[:-1] < rows[1:]) & (back[1:] >= rows[1:])).nonzero().flatten().add(1).tolist()
    starts: list[int] = [0]
    for cut in cuts:
        if cut - starts[-1] >= min_rows and q_len - cut >= min_rows:
            starts.append(cut)
    if len(starts) == 1:
        return [(0, q_len, None)]
    ends = starts[1:] + [q_len]
    blocks = range(0, kv_len, q_len)
    return [(s, e, torch.cat([torch.arange(b + s, b + e, device=mask.device) for b in blocks]))
            for s, e in zip(starts, ends)]


def dense_mask_sdpa_forward(
    module: Any,  # noqa: ARG001
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    **_kwargs: Any,
) -> tuple[Any, None]:
    import torch
    import torch.nn.functional as F  # noqa: N812

    q_len = query.shape[-2]
    mask, groups = _dense_mask(attention_mask, q_len, key.shape[-2], query.device)
    gqa = query.shape[1] != key.shape[1]
    if len(groups) == 1:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling, enable_gqa=gqa)
        return out.transpose(1, 2).contiguous(), None
    parts = []
    for start, end, keys in groups:
        parts.append(F.scaled_dot_product_attention(
            query[..., start:end, :], key.index_select(-2, keys), value.index_select(-2, keys),
            attn_mask=mask[..., start:end, :].index_select(-1, keys), scale=scaling, enable_gqa=gqa))
    return torch.cat(parts, dim=-2).transpose(1, 2).contiguous(), None


def register() -> str:
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(NAME, dense_mask_sdpa_forward)
    return NAME


def attention_for(device: str) -> str:
    """The attention implementation the draft trains and evaluates with on ``device``."""
    return register() if device == "cpu" else "simple_flex_attention"
