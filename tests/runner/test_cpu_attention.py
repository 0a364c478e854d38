"""The CPU attention used for training equals speculators' FlexAttention path (forward), on
speculators' own document/causal/draft masks, for the first and two extended draft steps; cut
into per-document row groups, its forward and gradients equal one call over the whole mask,
and a mask whose rows reach across documents is not cut."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = r"""
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, create_mask
from speculators.models.eagle3.attention import (
    create_combined_mask_mod, extend_mask_for_draft_tokens, flex_attention_forward)
from eagle3_runner.common.cpu_attention import dense_mask_sdpa_forward, row_groups

torch.manual_seed(0)
T, H, KV, D = 512, 4, 2, 16
lengths = torch.tensor([150, 140, 60, 40])  # 122 padding positions
mask = create_block_mask(create_combined_mask_mod(lengths, T), B=None, H=None, Q_LEN=T, KV_LEN=T, device="cpu")
worst = worst_grad = 0.0
for step in range(3):
    dense = create_mask(mask.mask_mod, None, None, T, T * (step + 1), device="cpu")
    # documents of at least 128 rows get their own group; the two short ones join the padding
    assert [g[:2] for g in row_groups(dense, T, T * (step + 1))] == [(0, 150), (150, 290), (290, T)]
    q = torch.randn(1, H, T, D, requires_grad=True)
    k = torch.randn(1, KV, T * (step + 1), D, requires_grad=True)
    v = torch.randn(1, KV, T * (step + 1), D, requires_grad=True)
    # FlexAttention has no CPU backward: its forward on detached copies
    want, _ = flex_attention_forward(None, q.detach(), k.detach(), v.detach(), mask, scaling=D ** -0.5)
    got, _ = dense_mask_sdpa_forward(None, q, k, v, mask, scaling=D ** -0.5)
    assert got.shape == want.shape == (1, T, H, D)
    worst = max(worst, float((got - want).abs().max()))
    upstream = torch.randn_like(got)
    grads = torch.autograd.grad((got * upstream).sum(), (q, k, v))
    whole = F.scaled_dot_product_attention(q, k, v, attn_mask=dense, scale=D ** -0.5, enable_gqa=True)
    whole_grads = torch.autograd.grad((whole.transpose(1, 2) * upstream).sum(), (q, k, v))
    worst = max(worst, float((got - whole.transpose(1, 2)).abs().max()))
    worst_grad = max(worst_grad, *(float((a - b).abs().max()) for a, b in zip(grads, whole_grads)))
    mask = extend_mask_for_draft_tokens(mask)
causal = create_mask(lambda b, h, q, kv: q >= kv, None, None, T, T, device="cpu")
assert [g[:2] for g in row_groups(causal, T, T)] == [(0, T)]  # every row reaches back to the first key
print("WORST", worst, worst_grad)
assert worst < 1e-4 and worst_grad < 1e-4, (worst, worst_grad)
"""


def test_dense_mask_sdpa_equals_flex_attention(patched_site):
    p = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(patched_site)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "WORST" in p.stdout
