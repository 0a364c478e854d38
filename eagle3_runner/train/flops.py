"""Model FLOPs of one EAGLE-3 draft training step, counted from the shapes.

The draft is speculators' ``Eagle3DraftModel`` (``speculators/models/eagle3/core.py``): ``fc``
maps the three auxiliary states (``3H``) to ``H`` once per batch; then for each of the ``K``
TTT steps the decoder layers run on ``cat(embed(ids), h)`` (``2H`` wide for the first layer)
and the draft ``lm_head`` gives ``V`` draft-vocabulary logits; the teacher logits come from the
verifier's ``lm_head`` (restricted to the draft vocabulary) once per batch, without gradient.

Only matrix products count (2 FLOPs per multiply-add); norms, rotary, softmax/KL and the
optimizer are not model FLOPs.  Per *real* token (padding rows of a packed batch are waste,
not model work), with H hidden, I intermediate, ``q = heads * head_dim``, ``kv = kv_heads *
head_dim``, V draft vocab, L draft layers, K TTT steps::

    layer(first) = 2*2H*q + 2*2*2H*kv + 2*q*H + 3*2*H*I      (q/k/v over 2H, o, gate/up/down)
    layer(other) = 2*H*q  + 2*2*H*kv  + 2*q*H + 3*2*H*I
    head         = 2*H*V
    fc           = 2*3H*H
    F_tok = 3*K*(sum(layers) + head)       forward + backward (2x forward: input and weight grads)
          + 2*fc                           forward + weight grad (its input is data: no input grad)
          + head                           verifier lm_head for the teacher logits, forward only

Attention (per layer, per TTT step ``k`` = 0..K-1): QK^T and PV are ``2*2*heads*head_dim``
FLOPs per (query, key) pair; the pairs are the causal ones within each packed document,
``sum_j n_j (n_j + 1) / 2``, plus the ``k`` draft keys each token sees on the diagonal at step
``k`` (speculators' ``extend_mask_for_draft_tokens``), counted forward + backward (x3)::

    F_attn = 3 * L * sum_k 4*heads*head_dim * (sum_j n_j(n_j+1)/2 + k*N)

A step's FLOPs are ``N * F_tok + F_attn`` for ``N = sum_j n_j`` real tokens.  MFU is that over
the step time and the GPU's dense bf16 peak (H200: 989 TFLOP/s datasheet; 790 measured with an
8192^3 bf16 product in this workplace).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

H200_PEAK_BF16 = 989e12  # datasheet, dense
H200_MEASURED_BF16 = 790e12  # 8192^3 bf16 matmul, random data (the device library's KINDS.md)


@dataclass(frozen=True)
class DraftShapes:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    draft_vocab: int
    layers: int = 1
    ttt_steps: int = 3

    @classmethod
    def from_layer_config(cls, cfg: Any, draft_vocab: int, ttt_steps: int) -> DraftShapes:
        """From the draft's Llama layer config (``train.draft_layer_config``)."""
        heads = cfg.num_attention_heads
        return cls(hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, heads=heads,
                   kv_heads=cfg.num_key_value_heads or heads,
                   head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
                   draft_vocab=draft_vocab, layers=cfg.num_hidden_layers, ttt_steps=ttt_steps)


def per_token_flops(s: DraftShapes) -> dict[str, int]:
    """The length-independent FLOPs per real token, by part (training multipliers applied)."""
    h, q, kv = s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim
    mlp = 3 * 2 * h * s.intermediate
    first = 2 * 2 * h * q + 2 * 2 * 2 * h * kv + 2 * q * h + mlp
    other = 2 * h * q + 2 * 2 * h * kv + 2 * q * h + mlp
    layers = first + (s.layers - 1) * other
    head = 2 * h * s.draft_vocab
    return {
        "fc": 2 * (2 * 3 * h * h),
        "decoder_layers": 3 * s.ttt_steps * layers,
        "draft_lm_head": 3 * s.ttt_steps * head,
        "verifier_lm_head": head,
    }


def attention_flops(s: DraftShapes, lengths: Sequence[int]) -> int:
    """Attention FLOPs (forward + backward) of one step over documents of these lengths."""
    n = sum(int(x) for x in lengths)
    causal = sum(int(x) * (int(x) + 1) // 2 for x in lengths)
    pairs = sum(causal + k * n for k in range(s.ttt_steps))
    return 3 * s.layers * 4 * s.heads * s.head_dim * pairs


def step_flops(s: DraftShapes, lengths: Sequence[int]) -> dict[str, int]:
    """FLOPs of one training step by part, and ``total``, for a packed batch of ``lengths``."""
    n = sum(int(x) for x in lengths)
    out = {k: n * v for k, v in per_token_flops(s).items()}
    out["attention"] = attention_flops(s, lengths)
    out["total"] = sum(out.values())
    return out


def mfu(flops: float, seconds: float, peak: float = H200_PEAK_BF16) -> float:
    return flops / seconds / peak if seconds > 0 else 0.0
