"""The training recipe through speculators' own Trainer on the tiny Llama's samples: epochs become
steps, the held-out split is scored every N steps and the best weights are the ones saved, the
scorer packs samples without changing a score, and a time limit needs the fast loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from eagle3_runner.train import read_losses

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vocab(tmp_path_factory, hf_samples):
    from eagle3_runner.common.formats import freq_path_for
    from eagle3_runner.train.vocab import build_vocab

    out = tmp_path_factory.mktemp("recipe") / "vocab"
    build_vocab(freq_path_for(hf_samples.parent / "tokens.jsonl"), None, 256, out)
    return out


def _train(run_cli, site, samples, vocab, verifier, out, *args):
    p = run_cli("train", "--data", str(samples), "--vocab", str(vocab), "--verifier", str(verifier), "--output", str(out),
                "--max-len", "256", "--lr", "3e-3", *args, env={"PYTHONPATH": str(site)}, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads((out / "train_config.json").read_text()), p


def test_epochs_become_steps_and_the_best_scored_weights_are_saved(tmp_path, tiny_llama, hf_samples, vocab,
                                                                   train_site, run_cli):
    one, _ = _train(run_cli, train_site, hf_samples, vocab, tiny_llama, tmp_path / "e1", "--epochs", "1",
                    "--eval-every", "0")
    more, p = _train(run_cli, train_site, hf_samples, vocab, tiny_llama, tmp_path / "e25", "--epochs", "2.5",
                     "--eval-every", "3")
    assert more["steps"] == -(-5 * one["steps"] // 2) and len(read_losses(tmp_path / "e25")) == more["steps"]
    assert not (tmp_path / "e1" / "evals.jsonl").exists() and one["best_step"] is None
    evals = [json.loads(x) for x in (tmp_path / "e25" / "evals.jsonl").read_text().splitlines()]
    steps = [e["step"] for e in evals]
    # every 3 steps, and once more on the last weights
    assert steps[-1] == more["steps"] and all(b - a >= 3 for a, b in zip(steps[:-1], steps[1:-1]))
    assert len(steps) >= more["steps"] // 3
    best = max(evals, key=lambda e: e["mean_acceptance_length"])
    assert more["best_step"] == best["step"]
    # eval.json scores the saved weights with the same scorer: the best one's numbers (bf16 weights
    # in the checkpoint; the run scored float32 ones) unless the last weights were the best
    saved = json.loads((tmp_path / "e25" / "eval.json").read_text())
    assert abs(saved["mean_acceptance_length"] - best["mean_acceptance_length"]) < 0.05
    assert "s/step, ETA" in p.stderr and "held-out mean acceptance length" in p.stderr


def test_packing_samples_into_one_forward_changes_no_score(tmp_path, tiny_llama, hf_samples, vocab, train_site,
                                                           run_cli):
    _train(run_cli, train_site, hf_samples, vocab, tiny_llama, tmp_path / "ckpt", "--steps", "8", "--eval-every", "0")
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from eagle3_runner.common.draft_model import load_draft\n"
        "from eagle3_runner.evaluate import Scorer\n"
        "from eagle3_runner.common.formats import iter_sample_files\n"
        f"files = [p for _, p in iter_sample_files(Path({str(hf_samples)!r}))]\n"
        f"m = load_draft(Path({str(tmp_path / 'ckpt' / '0')!r}))\n"
        "out = {}\n"
        "for pack in (0, 1024):\n"
        f"    s = Scorer(files, Path({str(tiny_llama)!r}), 'cpu', 3, pack_tokens=pack)\n"
        "    r = s.score(m)\n"
        "    out[pack] = [len(s.groups), r.walk.to_dict(), r.all_positions.to_dict(), r.vocab_coverage]\n"
        "print(json.dumps(out))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(train_site)})
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    single, packed = res["0"], res["1024"]
    assert single[0] == len(list(hf_samples.glob("data_*.pt"))) and packed[0] < single[0] / 2
    assert packed[1:] == single[1:]


def test_a_time_limit_needs_the_fast_loop(tmp_path, tiny_llama, hf_samples, vocab, train_site, run_cli):
    p = run_cli("train", "--data", str(hf_samples), "--vocab", str(vocab), "--verifier", str(tiny_llama), "--output",
                str(tmp_path / "c"), "--steps", "2", "--max-minutes", "1", "--loop", "speculators",
                env={"PYTHONPATH": str(train_site)}, timeout=600)
    assert p.returncode == 2 and "--max-minutes needs --loop fast" in p.stderr
