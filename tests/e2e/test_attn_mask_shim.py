"""The vendored ``_prepare_4d_causal_attention_mask`` fallback (``patches/shims/attn_mask.py``)
equals transformers' own implementation where transformers still has one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SHIM = Path(__file__).resolve().parents[2] / "patches" / "shims" / "attn_mask.py"


def _shim():
    spec = importlib.util.spec_from_file_location("_vllm_compat_attn_mask_under_test", SHIM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("past", [0, 3])
@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fallback_equals_transformers(past, window, dtype):
    reference = pytest.importorskip("transformers.modeling_attn_mask_utils")
    shim = _shim()
    batch, q = 2, 5
    mask2d = torch.ones(batch, q + past, dtype=torch.long)
    mask2d[1, :2] = 0  # left padding in the second row
    embeds = torch.zeros(batch, q, 4, dtype=dtype)
    want = reference._prepare_4d_causal_attention_mask(mask2d, (batch, q), embeds, past, sliding_window=window)
    got = shim._causal_4d(mask2d, (batch, q), embeds, past, window)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got, want)
    assert torch.equal(shim._prepare_4d_causal_attention_mask(mask2d, (batch, q), embeds, past, window), want)
