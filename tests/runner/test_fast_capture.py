"""The fast capture path (eagle3_runner.extract.backends.vllm_fast) against HF transformers, on real vLLM (CPU).

One engine for the module: a tiny float32 Llama, a ragged batch of 14 prompts (one of them longer
than ``max_num_batched_tokens``, so its prefill is chunked over several steps; two with identical
tokens), states compared with hooks on the HF model (same convention: residual stream entering
layer i; for id N the last layer's output before the final norm), files atomic, resume.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from eagle3_runner.extract.backends import vllm_fast as fc  # noqa: E402

LAYER_IDS = [0, 2, 5, 6]  # 6 = N (num_hidden_layers): output of the last layer
MAX_BATCHED = 64
MAX_MODEL_LEN = 256


def _samples() -> list[tuple[int, list[int], list[int]]]:
    rng = random.Random(7)
    out = []
    for i in range(14):
        n = 200 if i == 3 else rng.randint(2, 50)  # 200 > MAX_BATCHED: chunked prefill
        ids = [rng.randrange(6, 512) for _ in range(n)]
        out.append((100 + i, ids, [rng.randint(0, 1) for _ in range(n)]))
    out.append((200, list(out[5][1]), list(out[5][2])))  # same tokens as another sample
    return out


def hf_states(model, ids: list[int], layer_ids: list[int]) -> list[torch.Tensor]:
    """Residual stream entering layer i (i < N) / leaving the last layer (N), via HF hooks."""
    layers = model.model.layers
    n = len(layers)
    got: dict[int, torch.Tensor] = {}
    handles = []

    def pre(lid, module, args, kwargs):
        hs = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        got[lid] = hs[0].detach().clone()

    def post(lid, module, args, kwargs, output):
        hs = output[0] if isinstance(output, tuple) else output
        got[lid] = hs[0].detach().clone()

    for lid in layer_ids:
        if lid < n:
            handles.append(layers[lid].register_forward_pre_hook(
                lambda m, a, k, lid=lid: pre(lid, m, a, k), with_kwargs=True))
        else:
            handles.append(layers[n - 1].register_forward_hook(
                lambda m, a, k, o, lid=lid: post(lid, m, a, k, o), with_kwargs=True))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return [got[lid] for lid in layer_ids]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    from eagle3_runner.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), seed=0)


@pytest.fixture(scope="module")
def llm(tiny_llama):
    pytest.importorskip("vllm")
    engine = fc.make_llm(tiny_llama, max_model_len=MAX_MODEL_LEN, dtype="float32",
                         gpu_memory_utilization=0.3, max_num_batched_tokens=MAX_BATCHED,
                         max_num_seqs=8)
    yield engine
    del engine


@pytest.fixture(scope="module")
def hf_model(tiny_llama):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.float32)
    return model.eval()


def _check_file(path: Path, ids, lm, hf_model) -> None:
    sample = torch.load(str(path), map_location="cpu", weights_only=True)
    assert set(sample) == {"input_ids", "hidden_states", "loss_mask"}
    assert sample["input_ids"].dtype == torch.long and sample["loss_mask"].dtype == torch.long
    assert sample["input_ids"].tolist() == ids
    assert sample["loss_mask"].tolist() == lm
    hs = sample["hidden_states"]
    assert isinstance(hs, list) and len(hs) == len(LAYER_IDS)
    ref = hf_states(hf_model, ids, LAYER_IDS)
    for lid, got, want in zip(LAYER_IDS, hs, ref):
        assert got.shape == want.shape == (len(ids), 256)
        assert got.dtype == torch.float32
        assert torch.isfinite(got).all()
        err = rel(got, want)
        assert err <= 1e-3, f"layer {lid}: rel err {err:.2e} for {len(ids)} tokens"


@pytest.mark.slow
def test_fast_path_matches_hf_and_resumes(llm, hf_model, tmp_path) -> None:
    samples = _samples()
    out = tmp_path / "states"
    summary = fc.run_fast(llm, samples, out, LAYER_IDS, batch_size=8, max_model_len=MAX_MODEL_LEN)
    assert summary["bad"] == [] and summary["rejected"] == []
    assert summary["written"] == len(samples) == summary["submitted"]
    assert summary["tokens_captured"] == sum(len(s[1]) for s in samples)
    assert summary["steps"] >= 4  # the 200-token prompt alone needs 4 steps of 64 tokens
    names = sorted(os.listdir(out))
    assert names == sorted(f"data_{i}.pt" for i, _, _ in samples)  # no temp files left
    for index, ids, lm in samples:
        _check_file(out / f"data_{index}.pt", ids, lm, hf_model)

    # Resume: a missing and a truncated file are redone, the rest are skipped.
    (out / "data_101.pt").unlink()
    (out / "data_103.pt").write_bytes((out / "data_104.pt").read_bytes()[:1000])
    again = fc.run_fast(llm, samples, out, LAYER_IDS, batch_size=8, max_model_len=MAX_MODEL_LEN)
    assert again["skipped_existing"] == len(samples) - 2
    assert again["written"] == 2 and again["bad"] == []
    for index, ids, lm in samples:
        if index in (101, 103):
            _check_file(out / f"data_{index}.pt", ids, lm, hf_model)

    # A prompt too long for the engine is rejected up front, not sent.
    long = [(999, [7] * MAX_MODEL_LEN, [1] * MAX_MODEL_LEN)]
    third = fc.run_fast(llm, long, out, LAYER_IDS, max_model_len=MAX_MODEL_LEN)
    assert third["submitted"] == 0 and [r[0] for r in third["rejected"]] == [999]


@pytest.mark.parametrize("mode", ["raw", "torch"])
def test_atomic_writer_formats(tmp_path, mode) -> None:
    g = torch.Generator().manual_seed(0)
    sample = {
        "input_ids": torch.arange(5, dtype=torch.long),
        "hidden_states": [torch.randn(5, 8, generator=g).to(torch.bfloat16) for _ in range(3)],
        "loss_mask": torch.tensor([0, 1, 1, 0, 1]),
    }
    path = tmp_path / "data_0.pt"
    n = fc.write_sample_atomic(path, sample, mode=mode)
    assert n == 5 * 8 + 3 * 5 * 8 * 2 + 5 * 8
    loaded = torch.load(str(path), weights_only=True)
    assert torch.equal(loaded["input_ids"], sample["input_ids"])
    assert torch.equal(loaded["loss_mask"], sample["loss_mask"])
    for a, b in zip(loaded["hidden_states"], sample["hidden_states"]):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)
    assert fc.valid_sample_file(path, list(range(5)), 3, 8)
    assert not fc.valid_sample_file(path, list(range(1, 6)), 3, 8)
    assert not fc.valid_sample_file(path, list(range(5)), 3, 16)
    assert os.listdir(tmp_path) == ["data_0.pt"]


def test_raw_writer_refuses_views_and_leaves_nothing(tmp_path) -> None:
    big = torch.zeros(10, 8)
    sample = {"input_ids": torch.arange(5), "hidden_states": [big[:5]], "loss_mask": torch.ones(5, dtype=torch.long)}
    with pytest.raises(ValueError):
        fc.write_sample_atomic(tmp_path / "data_1.pt", sample, mode="raw")
    assert os.listdir(tmp_path) == []
