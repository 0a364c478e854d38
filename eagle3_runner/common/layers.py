"""The hidden-state capture convention shared by every backend.

Layer id ``i`` with ``0 <= i < N`` (``N = num_hidden_layers``) is the residual stream ENTERING
decoder layer ``i``: ``hidden_states + residual`` as passed to layer ``i`` (for ``i = 0`` the
embeddings).  In HF terms that is ``output_hidden_states[i]``, the input of layer ``i``.  This
is what vLLM's EAGLE-3 serving path feeds the draft (``aux_hidden_state_layers``).

Layer id ``N`` is the output of the last decoder layer BEFORE the final norm (HF's last
``output_hidden_states`` entry is after the norm, so it is not used for ``N``).

The default ids are ``[2, N // 2, N - 3, N]``: three auxiliary layers for the draft's input and
the last one for the teacher logits (speculators' ``standardize_data_v1`` concatenates all but
the last and uses the last as ``verifier_last_hidden_states``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .errors import UsageError

logger = logging.getLogger(__name__)

CONVENTION = (
    "layer id i < N: residual stream entering decoder layer i (hidden_states + residual, "
    "= HF output_hidden_states[i]); layer id N = num_hidden_layers: last decoder layer's "
    "output before the final norm"
)


def num_layers(config: Any) -> int:
    """``num_hidden_layers`` of a (possibly multimodal) HF config."""
    if hasattr(config, "num_hidden_layers"):
        return int(config.num_hidden_layers)
    text = getattr(config, "text_config", None)
    if text is not None and hasattr(text, "num_hidden_layers"):
        return int(text.num_hidden_layers)
    raise UsageError(f"cannot tell the number of decoder layers of a {type(config).__name__}")


def hidden_size(config: Any) -> int:
    text = getattr(config, "text_config", None)
    return int(getattr(config, "hidden_size", None) or text.hidden_size)


def default_layer_ids(n: int) -> list[int]:
    """``[2, N//2, N-3, N]``; for models so shallow that it repeats an id (N <= 6), the distinct
    ``[1, N//2, N-2, N]``: vLLM drops repeated aux layer ids when it serves the draft, which then
    fails on its first request (a shape error in ``combine_hidden_states``)."""
    ids = [2, n // 2, n - 3, n]
    if len(set(ids)) < len(ids):
        ids = [1, n // 2, n - 2, n]
    if len(set(ids)) < len(ids):
        raise UsageError(f"no default layer ids for a {n}-layer model: give --layers with distinct ids")
    return ids


def parse_layer_ids(spec: str | Sequence[int] | None, n: int) -> list[int]:
    """Parse ``"a,b,c"`` (or a sequence) and check every id lies in ``[0, n]``; ``None`` = default."""
    if spec is None or spec == "":
        ids = default_layer_ids(n)
    elif isinstance(spec, str):
        try:
            ids = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--layers must be comma-separated integers, got {spec!r}") from None
    else:
        ids = [int(x) for x in spec]
    if len(ids) < 2:
        raise UsageError(f"need at least two layer ids (auxiliary layers and the last), got {ids}")
    bad = [i for i in ids if not 0 <= i <= n]
    if bad:
        raise UsageError(
            f"layer ids {bad} are outside [0, {n}] (the model has {n} decoder layers; "
            f"id {n} is the last layer's output before the final norm)"
        )
    if len(set(ids)) != len(ids):
        raise UsageError(f"layer ids {ids} repeat an id: vLLM drops repeated aux layers when serving "
                         f"the draft, so a draft trained on them cannot be served; give distinct ids")
    return ids
