"""The whole pipeline on the tiny Llama (prepare -> extract -> vocab -> train, 20 steps) through
``eagle3 run CONFIG.toml``, and training under torchrun with 2 CPU processes (gloo, FSDP).

Training runs speculators' own Trainer/Eagle3DraftModel from a patched speculators site
(``train_site``), so both run as subprocesses with that site on PYTHONPATH."""

from __future__ import annotations

import json
import textwrap

import pytest

from eagle3_runner.train import read_losses

pytestmark = pytest.mark.slow


def _load_draft(run_cli, site, checkpoint):
    code = (
        "import sys, json\n"
        "from eagle3_runner.train import load_draft\n"
        f"m = load_draft({str(checkpoint)!r})\n"
        "print(json.dumps({'cls': type(m).__name__, 'd2t': list(m.d2t.shape), 't2d': int(m.t2d.sum()),"
        " 'aux': m.config.eagle_aux_hidden_state_layer_ids,"
        " 'verifier': m.config.speculators_config.verifier.name_or_path}))\n"
    )
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(site)})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_pipeline_tiny_llama_loss_decreases_and_checkpoint_loads(tmp_path, tiny_llama, chat_file, train_site, run_cli):
    config = tmp_path / "run.toml"
    config.write_text(textwrap.dedent(f"""
        workdir = "work"
        model = "{tiny_llama}"
        [prepare]
        data = "{chat_file}"
        seq_length = 256
        regenerate = false  # the random tiny model's own answers are near-constant: little to learn
        [extract]
        backend = "hf"
        dtype = "float32"
        [vocab]
        draft_vocab_size = 256
        [train]
        steps = 20
        device = "cpu"
        lr = 3e-3
        max_len = 256
        [serve_check]
        enabled = false  # serving the draft: tests/runner/test_acceptance_e2e.py
    """))
    env = {"PYTHONPATH": str(train_site)}
    p = run_cli("run", str(config), env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    work = tmp_path / "work"
    losses = read_losses(work / "checkpoint")
    assert len(losses) == 20
    assert all(x == x for x in losses)  # finite
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses
    assert "checkpoint: " in p.stdout and "training loss (20 steps" in p.stdout

    info = _load_draft(run_cli, train_site, work / "checkpoint" / "0")
    assert info == {"cls": "Eagle3DraftModel", "d2t": [256], "t2d": 256, "aux": [1, 3, 4],
                    "verifier": str(tiny_llama)}
    from safetensors import safe_open

    with safe_open(str(work / "checkpoint" / "0" / "model.safetensors"), "pt") as f:
        assert {"d2t", "t2d", "fc.weight", "lm_head.weight"} <= set(f.keys())
        assert "embed_tokens.weight" not in f.keys()  # the verifier's own: read from the verifier
    cfg = json.loads((work / "checkpoint" / "0" / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["draft_vocab_size"] == 256

    again = run_cli("run", str(config), env=env, timeout=600)  # everything complete: all skipped
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipped (already complete): prepare, vocab, train" in again.stdout
    assert read_losses(work / "checkpoint") == losses


def test_torchrun_two_cpu_processes(tmp_path, tiny_llama, hf_samples, train_site, run_cli):
    from eagle3_runner.common.formats import freq_path_for
    from eagle3_runner.train.vocab import build_vocab

    tokens = hf_samples.parent / "tokens.jsonl"
    build_vocab(freq_path_for(tokens), None, 256, tmp_path / "vocab")
    out = tmp_path / "ckpt"
    p = run_cli("train", "--data", str(hf_samples), "--vocab", str(tmp_path / "vocab"), "--verifier", str(tiny_llama),
                "--output", str(out), "--steps", "6", "--max-len", "256", "--lr", "3e-3", "--nproc", "2",
                env={"PYTHONPATH": str(train_site)}, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    losses = read_losses(out)
    assert len(losses) == 6 and all(x == x for x in losses)
    assert losses[-1] < losses[0]
    assert json.loads((out / "train_config.json").read_text())["world_size"] == 2
    assert p.stdout.count("training loss (6 steps") == 1
    info = _load_draft(run_cli, train_site, out / "0")
    assert info["cls"] == "Eagle3DraftModel" and info["t2d"] == 256
