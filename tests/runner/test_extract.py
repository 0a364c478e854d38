"""extract with the HF backend: states against an independent HF reference, the capture
convention, validation of bad samples, malformed input, sharding, and SIGKILL + resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from eagle3_runner.common.formats import read_token_rows

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def reference_states(model, ids: list[int], layer_ids: list[int]) -> list[torch.Tensor]:
    """HF's own output_hidden_states for ids < N (entry i = the input of layer i) and, for N,
    the input of the final norm (a pre-hook on model.model.norm): no decoder-layer hooks."""
    n = model.config.num_hidden_layers
    seen = {}
    handle = model.model.norm.register_forward_pre_hook(lambda m, args: seen.__setitem__("pre_norm", args[0]))
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    hs = out.hidden_states
    assert len(hs) == n + 1
    return [(seen["pre_norm"] if i == n else hs[i])[0] for i in layer_ids]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.fixture(scope="module")
def hf_model(tiny_llama):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.float32).eval()


def test_hf_backend_matches_reference_all_ids(tiny_llama, small_tokens, hf_model, tmp_path):
    from eagle3_runner.extract import ExtractOptions, extract

    ids = list(range(7))  # every id 0..N (N = 6 = before the final norm)
    r = extract(ExtractOptions(model=tiny_llama, input=small_tokens, output=tmp_path, layers=ids, backend="hf",
                               dtype="float32"))
    assert r.written == r.total == 8 and not r.bad
    rows = read_token_rows(small_tokens)
    for row in rows:
        sample = torch.load(tmp_path / f"data_{row.index}.pt", weights_only=True)
        assert sample["input_ids"].tolist() == row.input_ids
        assert sample["loss_mask"].tolist() == row.loss_mask
        ref = reference_states(hf_model, row.input_ids, ids)
        for lid, got, want in zip(ids, sample["hidden_states"], ref):
            assert got.shape == (len(row.input_ids), 256)
            assert rel(got, want) <= 1e-3, (row.index, lid)
    config = json.loads((tmp_path / "data_config.json").read_text())
    assert config["layer_ids"] == ids and config["dtype"] == "float32" and config["backend"] == "hf"


def test_convention_id_n_is_before_final_norm_and_ids_are_layer_inputs(tiny_llama, hf_samples, hf_model, tokens_file):
    row = read_token_rows(tokens_file)[0]
    sample = torch.load(hf_samples / f"data_{row.index}.pt", weights_only=True)
    layer_ids = json.loads((hf_samples / "data_config.json").read_text())["layer_ids"]
    assert layer_ids == [1, 3, 4, 6]  # [2, N//2, N-3, N] repeats an id for N = 6: the distinct fallback
    with torch.inference_mode():
        out = hf_model(input_ids=torch.tensor([row.input_ids]), output_hidden_states=True)
        last = sample["hidden_states"][-1]
        # id N: applying the model's final norm gives HF's (post-norm) last hidden state
        assert rel(hf_model.model.norm(last[None])[0], out.hidden_states[-1][0]) <= 1e-5
        assert rel(last, out.hidden_states[-1][0]) > 1e-2  # and it is not already normed
        # id i < N: the input of layer i, i.e. the embeddings for i = 0 and HF hidden_states[i]
        assert rel(sample["hidden_states"][0], out.hidden_states[1][0]) <= 1e-5  # id 1 = input of layer 1
        assert rel(out.hidden_states[0][0], hf_model.model.embed_tokens(torch.tensor(row.input_ids))) == 0


def test_layer_ids_outside_range_are_usage_errors(tiny_llama, small_tokens, tmp_path, capsys):
    from eagle3_runner.cli import main

    code = main(["extract", "--model", str(tiny_llama), "--input", str(small_tokens), "--output", str(tmp_path / "o"),
                 "--layers", "2,3,7", "--backend", "hf"])
    assert code == 2 and "outside [0, 6]" in capsys.readouterr().err


def test_malformed_token_rows(tiny_llama, small_tokens, tmp_path, capsys):
    from eagle3_runner.cli import main

    lines = small_tokens.read_text().splitlines()[:5]
    lines[1] = '{"input_ids": [1, 2, 3], "loss_mask": [0, 1]}'
    lines[3] = '{"input_ids": [1, 9999], "loss_mask": [0, 1]}'
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\nnot json\n")
    out = tmp_path / "o"
    code = main(["extract", "--model", str(tiny_llama), "--input", str(bad), "--output", str(out), "--backend", "hf"])
    err = capsys.readouterr().err
    assert code == 3, err
    for lineno in (2, 4, 6):
        assert f"{bad}:{lineno}:" in err
    assert "3 malformed token rows" in err
    assert not out.exists() or not list(out.glob("data_*.pt"))


def test_nan_sample_reported_not_written_others_kept(tiny_llama, small_tokens, tmp_path, capsys):
    """A model whose embedding row of one token is NaN: samples containing it fail the real
    validation (reported by line, not written); every other sample is written."""
    import shutil

    from safetensors.torch import load_file, save_file

    from eagle3_runner.cli import main

    model = tmp_path / "poisoned"
    shutil.copytree(tiny_llama, model)
    state = load_file(str(model / "model.safetensors"))
    rows = read_token_rows(small_tokens)
    poison = rows[5].input_ids[-3]
    state["model.embed_tokens.weight"][poison] = float("nan")
    save_file(state, str(model / "model.safetensors"), metadata={"format": "pt"})
    hit = {r.index for r in rows if poison in r.input_ids}
    assert 0 < len(hit) < len(rows)

    out = tmp_path / "o"
    code = main(["-q", "extract", "--model", str(model), "--input", str(small_tokens), "--output", str(out),
                 "--backend", "hf"])
    err = capsys.readouterr().err
    assert code == 5
    for i in hit:
        assert f"line {i + 1} (data_{i}.pt): hidden_states[0] is not finite" in err
    written = {int(p.stem.split("_")[1]) for p in out.glob("data_*.pt")}
    assert written == {r.index for r in rows} - hit


def test_shards_partition_lines_round_robin(tiny_llama, small_tokens, hf_samples, tmp_path):
    from eagle3_runner.extract import ExtractOptions, extract

    out = tmp_path / "o"
    for i in range(3):
        r = extract(ExtractOptions(model=tiny_llama, input=small_tokens, output=out, backend="hf", dtype="float32",
                                   shard=(i, 3)))
        assert r.written == len([x for x in read_token_rows(small_tokens) if x.index % 3 == i])
    names = sorted(p.name for p in out.glob("data_*.pt"))
    assert names == sorted(f"data_{i}.pt" for i in range(8))
    for name in names:  # same states as the unsharded run
        assert _sample_equal(torch.load(out / name, weights_only=True), torch.load(hf_samples / name, weights_only=True))


def _sample_equal(a, b) -> bool:
    return (torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["loss_mask"], b["loss_mask"])
            and len(a["hidden_states"]) == len(b["hidden_states"])
            and all(torch.equal(x, y) for x, y in zip(a["hidden_states"], b["hidden_states"])))


def test_sigkill_then_resume_gives_exactly_one_valid_file_per_line(tiny_llama, tokens_file, hf_samples, tmp_path):
    n = len(read_token_rows(tokens_file))
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "eagle3_runner", "-q", "extract", "--model", str(tiny_llama), "--input",
           str(tokens_file), "--output", str(out), "--backend", "hf", "--dtype", "float32", "--batch-size", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if out.is_dir() and len(list(out.glob("data_*.pt"))) >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "extract finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    done = sorted(out.glob("data_*.pt"))
    assert 3 <= len(done) < n
    for p in done:  # whatever is there is complete
        torch.load(p, weights_only=True)

    from eagle3_runner.cli import main

    assert main(cmd[3:]) == 0  # the same command, re-run (in-process)
    files = sorted(out.glob("data_*.pt"))
    assert [p.name for p in files] == sorted(f"data_{i}.pt" for i in range(n))
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]
    for p in files:
        assert _sample_equal(torch.load(p, weights_only=True), torch.load(hf_samples / p.name, weights_only=True))


def test_resume_redoes_a_corrupt_file(tiny_llama, tokens_file, hf_samples, tmp_path):
    import shutil

    from eagle3_runner.extract import ExtractOptions, extract

    out = tmp_path / "o"
    shutil.copytree(hf_samples, out)
    (out / "data_4.pt").write_bytes((out / "data_4.pt").read_bytes()[:100])  # torn by hand
    r = extract(ExtractOptions(model=tiny_llama, input=tokens_file, output=out, backend="hf", dtype="float32"))
    assert r.written == 1 and r.skipped == r.total - 1
    assert _sample_equal(torch.load(out / "data_4.pt", weights_only=True),
                         torch.load(hf_samples / "data_4.pt", weights_only=True))


@pytest.mark.parametrize("sync,per_file,flushes", [("each", True, 0), ("end", False, 1), ("none", False, 0)])
def test_sync_modes_flush_what_they_promise(tiny_llama, small_tokens, tmp_path, monkeypatch, sync, per_file, flushes):
    import os
    import re

    from eagle3_runner.extract import ExtractOptions, extract

    seen = {"files": 0, "sync": 0}
    real_fsync = os.fsync

    def fsync(fd):
        if re.search(r"/\.data_\d+\.pt", os.readlink(f"/proc/self/fd/{fd}")):  # a sample's temporary, before its rename
            seen["files"] += 1
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "sync", lambda: seen.__setitem__("sync", seen["sync"] + 1))
    r = extract(ExtractOptions(model=tiny_llama, input=small_tokens, output=tmp_path, backend="hf", dtype="float32",
                               batch_size=3, sync=sync))
    assert r.written == 8 and not r.bad
    assert seen == {"files": 8 if per_file else 0, "sync": flushes}
