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


def norm_offset(verifier: Path) -> float:
    """What the verifier's final RMSNorm adds to its stored weight before scaling: 1.0 for a
    zero-centred norm (``x * (1 + weight)``: Qwen3-Next, Gemma), 0.0 for Llama's ``x * weight``.

    Read from the model's own HF modeling code: its final norm (``model.norm``), built on the meta
    device and materialized alone, with the weight zeroed, applied to a vector of ones (its output
    is the offset).  0.0, with a warning, where the model cannot be built so."""
    import logging

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        cfg = AutoConfig.from_pretrained(str(verifier))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        norm = model.get_submodule("model.norm").to_empty(device="cpu").float()
        with torch.no_grad():
            norm.weight.zero_()
            out = norm(torch.ones(1, norm.weight.shape[0]))
    except Exception as exc:  # noqa: BLE001 - a model HF cannot build on meta: assume Llama's norm
        logging.getLogger(__name__).warning("%s: cannot read its final norm's form from the HF model (%s); "
                                            "assuming x * weight", verifier, exc)
        return 0.0
    return 1.0 if float(out.abs().mean()) > 0.5 else 0.0


def verifier_head(verifier: Path) -> tuple[Any, Any, float]:
    """The verifier's final norm scale, lm_head weight and norm epsilon (float32).

    The scale is what multiplies the normalized state: the stored ``model.norm.weight``, plus 1 for
    a zero-centred norm (:func:`norm_offset`)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(verifier))
    cfg = getattr(cfg, "text_config", None) or cfg
    w = load_tensors(verifier, ["model.norm.weight", "lm_head.weight", "model.embed_tokens.weight"])
    head = w.get("lm_head.weight", w.get("model.embed_tokens.weight"))
    if "model.norm.weight" not in w or head is None:
        raise BadInput(f"{verifier}: no model.norm.weight / lm_head.weight to compute the verifier's tokens")
    scale = w["model.norm.weight"].float() + norm_offset(verifier)
    return scale, head.float(), float(getattr(cfg, "rms_norm_eps", 1e-6))


def verifier_greedy(last_layer: Any, norm_w: Any, head_w: Any, eps: float) -> Any:
    """``argmax(lm_head(norm(h_N)))`` per row: the verifier's greedy next token (full vocabulary)."""
    import torch

    h = last_layer.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * norm_w
    return (h @ head_w.T).argmax(-1)
