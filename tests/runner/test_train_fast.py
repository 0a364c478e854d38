"""The fast training path (``eagle3 train --loop fast``) against speculators' own pieces, on the
CPU: its loader yields speculators' batches, its loop gives speculators' losses, its FLOP
formula matches counted FLOPs, and bad sample files stop it with a clear error.

speculators runs from the patched site (``train_site``) in subprocesses, as in test_train.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3_runner.train import read_losses

PROBE = Path(__file__).with_name("_train_probe.py")
ROOT = Path(__file__).resolve().parents[2]


def _probe(site: Path, *args: str) -> dict:
    p = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def vocab(tmp_path_factory, hf_samples) -> Path:
    from eagle3_runner.common.formats import freq_path_for
    from eagle3_runner.train.vocab import build_vocab

    out = tmp_path_factory.mktemp("fast") / "vocab"
    build_vocab(freq_path_for(hf_samples.parent / "tokens.jsonl"), None, 256, out)
    return out


def _train(run_cli, site, samples, vocab, verifier, out, *extra):
    return run_cli("train", "--data", str(samples), "--vocab", str(vocab), "--verifier", str(verifier),
                   "--output", str(out), "--steps", "8", "--max-len", "256", "--lr", "3e-3", *extra,
                   env={"PYTHONPATH": str(site)}, timeout=900)


@pytest.mark.slow
def test_loader_yields_speculators_batches(hf_samples, train_site):
    """Same keys, dtypes, shapes and values as Eagle3SampleFileDataset + create_collate_fn
    (after the device-side float32 cast), including a batch that overflows max_len."""
    r = _probe(train_site, "batches", str(hf_samples), "256")
    assert any(len(b["lengths"]) < len(b["indices"]) for b in r["batches"]), "no batch overflowed max_len"
    for b in r["batches"]:
        assert all(b["equal"].values()), b


def _mean_gap(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


@pytest.mark.slow
def test_fast_loop_losses_equal_stock(tmp_path, tiny_llama, hf_samples, vocab, train_site, run_cli):
    """Same seed, data and steps on the CPU: the float32 fast loop equals speculators' loop to
    1e-5 (relative, every step): the same ops on equal tensors, so only float32 rounding may
    differ (a kernel taking another path for equal inputs laid out differently, ~1e-7 per op
    over 8 steps); measured 0.0 here.  bf16 autocast is "within noise": its mean per-step |loss
    difference| from speculators' loop is at most that between two seeds of speculators' loop
    (the benchmark's definition, benchmarks/gpu_train.py)."""
    runs = {}
    for name, extra in {"stock": ("--loop", "speculators"), "stock-seed1": ("--loop", "speculators", "--seed", "1"),
                        "fast": ("--loop", "fast", "--precision", "fp32"),
                        "bf16": ("--loop", "fast", "--precision", "bf16")}.items():
        p = _train(run_cli, train_site, hf_samples, vocab, tiny_llama, tmp_path / name, *extra)
        assert p.returncode == 0, p.stderr[-4000:]
        runs[name] = read_losses(tmp_path / name)
        assert len(runs[name]) == 8
    rel = [abs(a - b) / abs(b) for a, b in zip(runs["fast"], runs["stock"], strict=True)]
    assert max(rel) <= 1e-5, (rel, runs)
    assert _mean_gap(runs["bf16"], runs["stock"]) <= _mean_gap(runs["stock-seed1"], runs["stock"]), runs
    assert runs["fast"][-1] < runs["fast"][0] and runs["bf16"][-1] < runs["bf16"][0]
    cfg = json.loads((tmp_path / "fast" / "train_config.json").read_text())
    assert cfg["loop"] == "fast" and cfg["precision"] == "fp32"
    # the held-out split (default --val-fraction 0.1) is kept out of the fast loader and scored
    stock_cfg = json.loads((tmp_path / "stock" / "train_config.json").read_text())
    assert cfg["val_files"] and cfg["val_files"] == stock_cfg["val_files"], (cfg, stock_cfg)
    assert cfg["train_samples"] + len(cfg["val_files"]) == len(list(hf_samples.glob("data_*.pt")))
    report = json.loads((tmp_path / "fast" / "eval.json").read_text())
    assert report, "the fast loop wrote an empty eval.json"
    from safetensors import safe_open

    with safe_open(str(tmp_path / "fast" / "0" / "model.safetensors"), "pt") as f:
        assert {"d2t", "t2d", "fc.weight"} <= set(f.keys())


@pytest.mark.slow
def test_time_limit_ends_the_schedule_too(tmp_path, tiny_llama, hf_samples, vocab, train_site, run_cli):
    """Far more steps planned than 15 seconds hold: the loop stops at the limit, and the learning
    rate it logged warmed up, reached its peak and decayed to near 0 by then (before, the limit cut
    a run at its peak rate)."""
    out = tmp_path / "timed"
    p = run_cli("train", "--data", str(hf_samples), "--vocab", str(vocab), "--verifier", str(tiny_llama),
                "--output", str(out), "--steps", "200000", "--max-len", "256", "--lr", "3e-3", "--loop", "fast",
                "--precision", "fp32", "--eval-every", "0", "--max-minutes", "0.25", env={"PYTHONPATH": str(train_site)},
                timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "the time limit is reached" in p.stderr
    rates = [json.loads(x)["lr"] for x in (out / "loss.jsonl").read_text().splitlines()]
    assert 20 < len(rates) < 200000
    peak = max(rates)
    assert peak > 0.9 * 3e-3 and rates[0] < 0.5 * peak
    assert rates[-1] < 0.1 * peak, rates[-10:]
    assert (out / "0" / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "layers"])
def test_bad_sample_file_stops_with_its_name(tmp_path, tiny_llama, hf_samples, vocab, train_site, run_cli, damage):
    data = tmp_path / "samples"
    shutil.copytree(hf_samples, data)
    bad = data / "data_3.pt"
    if damage == "truncated":
        bad.write_bytes(bad.read_bytes()[:200])
        why = "cannot be loaded as a sample"
    else:
        s = torch.load(bad, weights_only=True)
        s["hidden_states"] = s["hidden_states"][:3]
        torch.save(s, bad)
        why = "must be a list of 4 tensors"
    p = _train(run_cli, train_site, data, vocab, tiny_llama, tmp_path / "ckpt", "--loop", "fast", "--steps", "30")
    assert p.returncode == 3, (p.returncode, p.stderr[-3000:])
    assert str(bad) in p.stderr and why in p.stderr, p.stderr[-3000:]
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_flop_formula_matches_counted_flops(hf_samples, vocab, tiny_llama, train_site):
    """Matrix-product FLOPs of one real forward + backward (torch's FlopCounterMode) equal the
    formula's per-token parts times the batch's rows; the formula's attention pairs equal the
    real queries' entries of speculators' own mask over the three TTT steps."""
    r = _probe(train_site, "flops", str(hf_samples), str(vocab), str(tiny_llama))
    linear = sum(v for k, v in r["by_op"].items() if k.split(".")[-1] in ("mm", "addmm"))
    assert linear == r["formula_linear"], r
    assert r["formula_attention"] == r["attention_per_pair"] * r["mask_pairs"], r


def test_prefetcher_casts_and_noises_only_real_rows():
    from eagle3_runner.train.data import DevicePrefetcher

    batch = {"hidden_states": torch.zeros(1, 6, 4, dtype=torch.bfloat16), "lengths": torch.tensor([2, 2]),
             "verifier_last_hidden_states": torch.ones(1, 6, 2, dtype=torch.bfloat16)}

    def plus_one(d):
        return {**d, "hidden_states": d["hidden_states"] + 1}

    (got,) = list(DevicePrefetcher([batch], "cpu", torch.float32, plus_one))
    assert got["hidden_states"].dtype == torch.float32 == got["verifier_last_hidden_states"].dtype
    assert torch.equal(got["hidden_states"][0, :4], torch.ones(4, 4))
    assert torch.equal(got["hidden_states"][0, 4:], torch.zeros(2, 4))
    assert torch.equal(batch["hidden_states"], torch.zeros(1, 6, 4, dtype=torch.bfloat16))  # input untouched


def test_flops_of_a_tiny_step_by_hand():
    """Every product of a 1-layer draft, H=8, I=16, 2 heads x 4 (1 kv head), V=10, TTT 2, two
    documents of 3 and 2 tokens, written out one by one."""
    from eagle3_runner.train.flops import DraftShapes, step_flops

    f = step_flops(DraftShapes(8, 16, 2, 1, 4, 10, 1, 2), [3, 2])
    q, k, v, o = 2 * 16 * 8, 2 * 16 * 4, 2 * 16 * 4, 2 * 8 * 8  # q/k/v over cat(embeds, h) = 16 wide
    mlp = 2 * 8 * 16 + 2 * 8 * 16 + 2 * 16 * 8  # gate, up, down
    head = 2 * 8 * 10
    assert (q, k, v, o, mlp, head) == (256, 128, 128, 128, 768, 160)
    # per token: 2 TTT steps x (layer + head) x 3 (forward, input grad, weight grad);
    # fc (24 -> 8) forward + weight grad; the verifier's head, forward only
    assert f["decoder_layers"] == 5 * 2 * 3 * 1408 == 42240
    assert f["draft_lm_head"] == 5 * 2 * 3 * 160 == 4800
    assert f["fc"] == 5 * 2 * (2 * 24 * 8) == 3840
    assert f["verifier_lm_head"] == 5 * 160 == 800
    # (query, key) pairs: causal within each document (6 + 3), then + 1 draft key per token at step 1
    assert f["attention"] == 3 * (9 + 14) * (2 * 2 * 4 + 2 * 2 * 4) == 2208
    assert f["total"] == 42240 + 4800 + 3840 + 800 + 2208 == 53888


def test_flops_of_llama3_8b_width_step():
    """The numbers quoted in the README (a 2 x 1023-token packed batch at Llama-3-8B width)."""
    from eagle3_runner.train.flops import DraftShapes, step_flops

    f = step_flops(DraftShapes(4096, 14336, 32, 8, 128, 32000, 1, 3), [1023, 1023])
    h, i, v, n = 4096, 14336, 32000, 2046
    layer = 2 * 2 * h * h + 2 * 2 * 2 * h * 1024 + 2 * h * h + 6 * h * i
    assert f["decoder_layers"] == n * 9 * layer
    assert f["draft_lm_head"] == n * 9 * 2 * h * v and f["verifier_lm_head"] == n * 2 * h * v
    assert f["fc"] == n * 2 * 2 * 3 * h * h
    assert f["attention"] == 3 * 4 * 4096 * sum(2 * 1023 * 1024 // 2 + k * n for k in range(3))
    assert round(f["total"] / 1e12, 2) == 14.89


def test_loop_options_reach_torchrun_ranks():
    from eagle3_runner.train.launch import train_args
    from eagle3_runner.train import TrainOptions

    args = train_args(TrainOptions(data=Path("d"), vocab=Path("v"), verifier=Path("m"), output=Path("o"),
                                   loop="fast", precision="bf16"))
    assert args[args.index("--loop") + 1] == "fast" and args[args.index("--precision") + 1] == "bf16"


def test_torchrun_arguments_parse_back_to_the_same_options():
    """Every option, None ones included, survives the trip to the ranks' own parser."""
    from dataclasses import fields

    from eagle3_runner.cli import _parser
    from eagle3_runner.train.launch import train_args
    from eagle3_runner.train import TrainOptions

    for extra in ({}, {"epochs": 2.5, "eval_every": 0, "max_minutes": 3.0, "compile": True}):
        opts = TrainOptions(data=Path("d"), vocab=Path("v"), verifier=Path("m"), output=Path("o"), **extra)
        a = _parser().parse_args(train_args(opts))
        for f in fields(opts):
            assert getattr(a, f.name) == getattr(opts, f.name), f.name
