"""The CPU attention used for training equals speculators' FlexAttention path (forward), on
speculators' own document/causal/draft masks, for the first and an extended draft step."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = r"""
import torch
from torch.nn.attention.flex_attention import create_block_mask
from speculators.models.eagle3.attention import (
    create_combined_mask_mod, extend_mask_for_draft_tokens, flex_attention_forward)
from eagle3_runner.common.cpu_attention import dense_mask_sdpa_forward

torch.manual_seed(0)
T, H, KV, D = 256, 4, 2, 16
lengths = torch.tensor([100, 60, 50])  # 46 padding positions
mask = create_block_mask(create_combined_mask_mod(lengths, T), B=None, H=None, Q_LEN=T, KV_LEN=T, device="cpu")
worst = 0.0
for step in range(3):
    q = torch.randn(1, H, T, D)
    k = torch.randn(1, KV, T * (step + 1), D)
    v = torch.randn(1, KV, T * (step + 1), D)
    want, _ = flex_attention_forward(None, q, k, v, mask, scaling=D ** -0.5)
    got, _ = dense_mask_sdpa_forward(None, q, k, v, mask, scaling=D ** -0.5)
    assert got.shape == want.shape == (1, T, H, D)
    worst = max(worst, float((got - want).abs().max()))
    mask = extend_mask_for_draft_tokens(mask)
print("WORST", worst)
assert worst < 1e-4, worst
"""


def test_dense_mask_sdpa_equals_flex_attention(patched_site):
    p = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(patched_site)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "WORST" in p.stdout
