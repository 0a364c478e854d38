"""prepare: the loss mask covers exactly the assistant tokens; malformed rows stop it cleanly."""

from __future__ import annotations

import json

import pytest

from eagle3_runner.formats import freq_path_for, read_token_rows
from eagle3_runner.chat_tokens import mask_by_prefix_diff, mask_with_generation_tags


def _spans(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_mask_covers_exactly_assistant_turns(tiny_llama, chat_rows, tokens_file):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_llama))
    rows = read_token_rows(tokens_file)
    assert len(rows) == len(chat_rows)
    for row, chat in zip(rows, chat_rows):
        replies = [m["content"] + "<|end|>" for m in chat["messages"] if m["role"] == "assistant"]
        spans = _spans(row.loss_mask)
        # one contiguous span per assistant turn, decoding to exactly the reply and its end token
        assert [tok.decode(row.input_ids[a:b]) for a, b in spans] == replies
        # and the unmasked tokens hold every user/system content
        unmasked = tok.decode([t for t, m in zip(row.input_ids, row.loss_mask) if not m])
        for m in chat["messages"]:
            if m["role"] != "assistant":
                assert m["content"] in unmasked


def test_prefix_diff_fallback_agrees_with_generation_tags(tiny_llama, chat_rows):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_llama))
    for chat in chat_rows[:8]:
        assert mask_by_prefix_diff(tok, chat["messages"]) == mask_with_generation_tags(tok, chat["messages"])


def test_frequencies_count_masked_tokens(tokens_file):
    freq = json.loads(freq_path_for(tokens_file).read_text())
    rows = read_token_rows(tokens_file)
    expected: dict[str, int] = {}
    for r in rows:
        for t, m in zip(r.input_ids, r.loss_mask):
            if m:
                expected[str(t)] = expected.get(str(t), 0) + 1
    assert freq["counts"] == expected
    assert freq["vocab_size"] == 512


def test_truncation(tiny_llama, chat_file, tmp_path):
    from eagle3_runner.prepare import prepare

    r = prepare(tiny_llama, chat_file, tmp_path / "t.jsonl", seq_length=16)
    rows = read_token_rows(r.output)
    assert all(len(x.input_ids) <= 16 and len(x.loss_mask) == len(x.input_ids) for x in rows)
    assert r.truncated > 0


def test_malformed_rows_named_and_nothing_written(tiny_llama, chat_rows, tmp_path, capsys):
    from eagle3_runner.cli import main

    bad = tmp_path / "bad.jsonl"
    lines = [json.dumps(r) for r in chat_rows[:6]]
    lines[2] = '{"messages": [{"role": "user", "content": "hi"}'  # line 3: broken JSON
    lines[4] = json.dumps({"messages": [{"role": "user"}]})  # line 5: no content
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    code = main(["prepare", "--model", str(tiny_llama), "--data", str(bad), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"{bad}:3:" in err and f"{bad}:5:" in err
    assert f"{bad}:1:" not in err
    assert out.read_text() == "previous\n"  # untouched
    assert not freq_path_for(out).exists()
    assert not [x for x in tmp_path.iterdir() if ".tmp-" in x.name]


@pytest.mark.parametrize("content", ["[1, 2]", '{"messages": []}', '{"messages": [{"role": 1, "content": "x"}]}'])
def test_row_shapes_rejected(tiny_llama, tmp_path, content):
    from eagle3_runner.errors import BadInput
    from eagle3_runner.prepare import prepare

    data = tmp_path / "d.jsonl"
    data.write_text(content + "\n")
    with pytest.raises(BadInput, match=":1:"):
        prepare(tiny_llama, data, tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()
