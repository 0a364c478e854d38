"""``eagle3 run`` with the [prepare] keys: a base model without a chat template goes through the
whole pipeline with ``--chat-template chatml`` (and ``regenerate``) or with plain text rows."""

from __future__ import annotations

import json
import textwrap

import pytest

from eagle3_runner.common.errors import UsageError
from eagle3_runner.run import load_config

from .base_model import base_model_of


def _config(tmp_path, body: str):
    path = tmp_path / "run.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_prepare_keys_load_and_are_checked(tmp_path):
    (tmp_path / "my.jinja").write_text("{{ messages }}")
    cfg = load_config(_config(tmp_path, """
        workdir = "w"
        model = "m"
        [prepare]
        data = ["a.jsonl", "b.parquet"]
        chat_template = "my.jinja"
        format = "sharegpt"
        skip_bad = true
        regenerate = true
        temperature = 0.7
        max_new_tokens = 64
        [vocab]
        draft_vocab_size = 8
    """))
    assert cfg.data == [tmp_path / "a.jsonl", tmp_path / "b.parquet"]
    assert cfg.prepare == {"chat_template": str(tmp_path / "my.jinja"), "format": "sharegpt", "skip_bad": True,
                           "regenerate": True, "temperature": 0.7, "max_new_tokens": 64}
    named = load_config(_config(tmp_path, 'workdir = "w"\nmodel = "m"\n[prepare]\ndata = "a"\nchat_template = "chatml"\n'
                                          '[vocab]\ndraft_vocab_size = 8\n'))
    assert named.prepare == {"chat_template": "chatml"} and named.data == tmp_path / "a"
    with pytest.raises(UsageError, match=r'^\[prepare\] regenerate = "yes": expected true or false$'):
        load_config(_config(tmp_path, 'workdir = "w"\nmodel = "m"\n[prepare]\ndata = "a"\nregenerate = "yes"\n'
                                      '[vocab]\ndraft_vocab_size = 8\n'))
    with pytest.raises(UsageError, match=r"^\[prepare\] max_new_tokens = true: expected an integer >= 1$"):
        load_config(_config(tmp_path, 'workdir = "w"\nmodel = "m"\n[prepare]\ndata = "a"\nmax_new_tokens = true\n'
                                      '[vocab]\ndraft_vocab_size = 8\n'))


@pytest.mark.slow
@pytest.mark.parametrize("rows", ["chatml-regenerated", "text"])
def test_base_model_through_eagle3_run(tmp_path, tiny_llama, chat_rows, train_site, run_cli, rows):
    from eagle3_runner.common.formats import read_token_rows
    from eagle3_runner.train import read_losses

    base = base_model_of(tiny_llama, tmp_path / "base")
    data = tmp_path / "data.jsonl"
    if rows == "text":
        lines = [{"text": " ".join(m["content"] for m in c["messages"])} for c in chat_rows]
        prepare_keys, flags = "", []
    else:  # the template named on the command line (eagle3 run --chat-template), the rest in [prepare]
        lines = chat_rows
        prepare_keys, flags = "regenerate = true\nmax_new_tokens = 8", ["--chat-template", "chatml"]
    data.write_text("".join(json.dumps(r) + "\n" for r in lines))
    config = tmp_path / "run.toml"
    config.write_text(textwrap.dedent("""
        workdir = "work"
        model = "{base}"
        [prepare]
        data = "{data}"
        seq_length = 256
        {keys}
        [extract]
        backend = "hf"
        dtype = "float32"
        [vocab]
        draft_vocab_size = 128
        [train]
        steps = 3
        device = "cpu"
        max_len = 128
    """).format(base=base, data=data, keys=prepare_keys.replace("\n", "\n        ")))
    env = {"PYTHONPATH": str(train_site)}
    p = run_cli("run", str(config), *flags, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    work = tmp_path / "work"
    assert len(read_losses(work / "checkpoint")) == 3
    record = json.loads((work / "tokens.prepare.json").read_text())
    tokens = read_token_rows(work / "tokens.jsonl")
    assert len(tokens) == len(chat_rows)
    if rows == "text":
        assert record["chat_template"] is None and record["mask_method"] == "text"
        assert all(all(r.loss_mask) for r in tokens)
        assert "serve_check: skipped" in p.stderr and not (work / "serve_check.json").exists()  # no turns to serve
    else:
        assert record["chat_template"]["name"] == "chatml" and record["chat_template"]["markers_as_text"]
        regen = record["regenerate"]
        assert regen["regenerated"] == len(chat_rows) and regen["stop"] == ["<|im_end|>"]
        assert (work / "tokens.regenerated.jsonl").is_file()
    again = run_cli("run", str(config), *flags, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipped (already complete): prepare, vocab, train" in again.stdout
