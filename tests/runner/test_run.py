"""``eagle3 run`` configuration handling, the CLI's exit codes, and the tiny model builders."""

from __future__ import annotations

import hashlib

import pytest

from eagle3_runner.cli import main
from eagle3_runner.common.errors import BadInput, UsageError
from eagle3_runner.run import example_config, load_config, train_options
from eagle3_runner.train import DEFAULT_LR


def test_example_config_is_complete_and_loads(tmp_path, capsys):
    assert main(["run", "--example-config"]) == 0
    text = capsys.readouterr().out
    assert text == example_config()
    path = tmp_path / "c.toml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.workdir == tmp_path / "runs/llama-8b"
    assert cfg.data == tmp_path / "data/chat.jsonl" and cfg.seq_length == 2048
    assert cfg.extract["backend"] == "vllm" and "draft_vocab_size" not in cfg.vocab  # sized from the data
    assert cfg.train["epochs"] == 2 and cfg.train["nproc"] == 1
    # a CPU machine can run it as written: nothing names a device, the runner's defaults apply
    opts = train_options(cfg)
    assert opts.device == "auto" and opts.loop == "auto" and opts.lr == DEFAULT_LR and opts.epochs == 2


def test_config_errors(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('workdir = "w"\nmodel = "m"\n[prepare]\ndata = "d"\n[vocab]\ndraft_vocab_size = 8\n[train]\nstep = 3\n')
    with pytest.raises(UsageError, match=r"^\[train\] step: unknown key; did you mean steps\?$"):
        load_config(path)
    path.write_text("workdir = \n")
    with pytest.raises(BadInput, match="not valid TOML"):
        load_config(path)
    assert main(["run"]) == 2


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("arch", ["llama", "deepseek_v2"])
def test_tiny_builders_are_deterministic_and_load(tmp_path, arch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eagle3_runner.tiny import BUILDERS

    a = BUILDERS[arch](tmp_path / "a", seed=1)
    b = BUILDERS[arch](tmp_path / "b", seed=1)
    c = BUILDERS[arch](tmp_path / "c", seed=2)
    assert _digest(a) == _digest(b)
    assert _digest(a)["model.safetensors"] != _digest(c)["model.safetensors"]
    model = AutoModelForCausalLM.from_pretrained(str(a))
    assert model.dtype == (torch.float32 if arch == "llama" else torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) < 6_000_000
    tok = AutoTokenizer.from_pretrained(str(a))
    assert len(tok) == 512 and tok.pad_token_id is not None and tok.eos_token_id is not None
    out = model.generate(**tok("Tell me about tea.", return_tensors="pt"), max_new_tokens=4, do_sample=False)
    assert out.shape[1] > 4
