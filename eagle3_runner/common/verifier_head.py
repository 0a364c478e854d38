"""The verifier's own greedy token, computed from its extracted last layer: final norm, then lm_head.

Used by ``eval`` (what the draft must match), ``vocab`` (which tokens the verifier predicts) and
training's held-out scoring.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import BadInput


def load_tensors(folder: Path, names: list[str]) -> dict[str, Any]:
    """The named tensors of a safetensors checkpoint (one file or an index of shards) that exist."""
    from safetensors import safe_open

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        where = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    elif (folder / "model.safetensors").is_file():
        where = dict.fromkeys(names, "model.safetensors")
    else:
        raise BadInput(f"{folder} holds no model.safetensors (or its index)")
    out: dict[str, Any] = {}
    for shard in sorted({where[n] for n in names if n in where}):
        with safe_open(str(folder / shard), framework="pt") as fh:
            out.update({n: fh.get_tensor(n) for n in names if where.get(n) == shard and n in fh.keys()})
    return out


def verifier_head(verifier: Path) -> tuple[Any, Any, float]:
    """The verifier's final norm weight, lm_head weight and norm epsilon (float32)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(verifier))
    cfg = getattr(cfg, "text_config", None) or cfg
    w = load_tensors(verifier, ["model.norm.weight", "lm_head.weight", "model.embed_tokens.weight"])
    head = w.get("lm_head.weight", w.get("model.embed_tokens.weight"))
    if "model.norm.weight" not in w or head is None:
        raise BadInput(f"{verifier}: no model.norm.weight / lm_head.weight to compute the verifier's tokens")
    return w["model.norm.weight"].float(), head.float(), float(getattr(cfg, "rms_norm_eps", 1e-6))


def verifier_greedy(last_layer: Any, norm_w: Any, head_w: Any, eps: float) -> Any:
    """``argmax(lm_head(norm(h_N)))`` per row: the verifier's greedy next token (full vocabulary)."""
    import torch

    h = last_layer.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * norm_w
    return (h @ head_w.T).argmax(-1)
