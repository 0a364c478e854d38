"""prepare: the loss mask covers exactly the assistant tokens; malformed rows stop it cleanly."""

from __future__ import annotations

import json

import pytest

from eagle3_runner.common.formats import freq_path_for, read_token_rows
from eagle3_runner.prepare.chat_tokens import mask_by_prefix_diff, mask_with_generation_tags


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
    from eagle3_runner.common.errors import BadInput
    from eagle3_runner.prepare import prepare

    data = tmp_path / "d.jsonl"
    data.write_text(content + "\n")
    with pytest.raises(BadInput, match=":1:"):
        prepare(tiny_llama, data, tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


# --- input formats, containers, templates, bad rows ---------------------------------------------

ROLE_TO_SHAREGPT = {"user": "human", "assistant": "gpt", "system": "system"}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sharegpt(chat):
    return {"conversations": [{"from": ROLE_TO_SHAREGPT[m["role"]], "value": m["content"]} for m in chat["messages"]]}


def _token_rows(path):
    return [(r.input_ids, r.loss_mask) for r in read_token_rows(path)]


@pytest.fixture(scope="module")
def base_llama(tiny_llama, runner_root):
    from .base_model import base_model_of

    return base_model_of(tiny_llama, runner_root / "base-llama")


def test_formats_and_containers_give_the_same_tokens(tiny_llama, chat_rows, tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from eagle3_runner.prepare import prepare

    rows = chat_rows[:10]
    ref = prepare(tiny_llama, _jsonl(tmp_path / "m.jsonl", rows), tmp_path / "ref.jsonl")
    want = _token_rows(ref.output)
    share = [_sharegpt(r) for r in rows]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "m.parquet")
    datasets.Dataset.from_list(share).save_to_disk(str(tmp_path / "sg-ds"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "m-dd"))
    variants = {
        "sg.jsonl": (_jsonl(tmp_path / "sg.jsonl", share), "sharegpt", "jsonl"),
        "m.parquet": (tmp_path / "m.parquet", "messages", "parquet"),
        "sg-ds": (tmp_path / "sg-ds", "sharegpt", "datasets"),
        "m-dd": (tmp_path / "m-dd", "messages", "datasets"),
    }
    for name, (path, fmt, container) in variants.items():
        r = prepare(tiny_llama, path, tmp_path / f"{name}.tokens.jsonl")
        assert _token_rows(r.output) == want, name
        assert [(i.format, i.container, i.rows, i.bad) for i in r.inputs] == [(fmt, container, 10, 0)]
    both = prepare(tiny_llama, [variants["sg.jsonl"][0], variants["m.parquet"][0]], tmp_path / "both.jsonl")
    assert _token_rows(both.output) == want + want


def test_sharegpt_roles_system_tools_and_tool_calls(tiny_llama, tmp_path):
    from eagle3_runner.prepare import prepare

    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    messages = {"tools": tools, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Look up tea."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "lookup", "arguments": {"q": "tea"}}}]},
        {"role": "tool", "content": "Tea is a drink."},
        {"role": "assistant", "content": "Tea is a drink."},
        {"role": "user", "content": "And bread?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Bread is "}, {"type": "text", "text": "food."}]},
    ]}
    sharegpt = {"system": "Be brief.", "tools": json.dumps(tools), "conversations": [
        {"from": "human", "value": "Look up tea."},
        {"from": "function_call", "value": json.dumps({"name": "lookup", "arguments": {"q": "tea"}})},
        {"from": "observation", "value": "Tea is a drink."},
        {"from": "chatgpt", "value": "Tea is a drink."},
        {"from": "user", "value": "And bread?"},
        {"from": "bard", "value": "Bread is food."},
    ]}
    a = prepare(tiny_llama, _jsonl(tmp_path / "m.jsonl", [messages]), tmp_path / "a.jsonl", chat_template="chatml")
    b = prepare(tiny_llama, _jsonl(tmp_path / "s.jsonl", [sharegpt]), tmp_path / "b.jsonl", chat_template="chatml")
    assert _token_rows(a.output) == _token_rows(b.output)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_llama))
    ids, mask = _token_rows(a.output)[0]
    text = tok.decode(ids)
    assert '"name": "lookup"' in text.split("Look up tea.")[0]  # tools declared in the system turn
    assert '<tool_call>\n{"name": "lookup", "arguments": {"q": "tea"}}\n</tool_call>' in text
    assert "<tool_response>\nTea is a drink.\n</tool_response>" in text
    assert tok.decode([t for t, m in zip(ids, mask) if m]).endswith("Tea is a drink.<|im_end|>Bread is food.<|im_end|>")


def test_text_rows_have_every_token_in_the_loss(tiny_llama, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from eagle3_runner.prepare import prepare

    texts = ["The river ran past the old mill.", "Two plus two is four, and ten divided by five is two."]
    pq.write_table(pa.Table.from_pylist([{"text": t, "id": i} for i, t in enumerate(texts)]), tmp_path / "t.parquet")
    r = prepare(tiny_llama, tmp_path / "t.parquet", tmp_path / "t.jsonl")
    tok = AutoTokenizer.from_pretrained(str(tiny_llama))
    assert _token_rows(r.output) == [(tok(t)["input_ids"], [1] * len(tok(t)["input_ids"])) for t in texts]
    assert r.mask_method == "text" and r.masked_tokens == r.tokens


def test_base_model_needs_a_template_for_chat_rows_not_for_text(base_llama, chat_file, tmp_path, capsys):
    from eagle3_runner.prepare.chat_templates import builtin_text
    from eagle3_runner.cli import main
    from eagle3_runner.common.formats import tokens_sibling

    out = tmp_path / "t.jsonl"
    assert main(["prepare", "--model", str(base_llama), "--data", str(chat_file), "--output", str(out)]) == 6
    err = capsys.readouterr().err
    assert "has no chat template" in err and "--chat-template" in err and not out.exists()

    assert main(["prepare", "--model", str(base_llama), "--data", str(chat_file), "--output", str(out),
                 "--chat-template", "chatml"]) == 0
    assert "chat template: builtin chatml" in capsys.readouterr().out
    record = json.loads(tokens_sibling(out, ".prepare.json").read_text())
    assert record["chat_template"]["source"] == "builtin" and record["chat_template"]["name"] == "chatml"
    assert record["chat_template"]["markers_as_text"] == ["<|im_end|>", "<|im_start|>"]
    assert tokens_sibling(out, ".template.jinja").read_text() == builtin_text("chatml")
    assert record["mask_method"] == "generation-tags" and record["counts"]["rows"] == 24

    text = _jsonl(tmp_path / "text.jsonl", [{"text": "The cat slept in the sun."}])
    assert main(["prepare", "--model", str(base_llama), "--data", str(text), "--output", str(out)]) == 0
    assert not tokens_sibling(out, ".template.jinja").exists()  # no template used: the stale one is gone
    assert json.loads(tokens_sibling(out, ".prepare.json").read_text())["chat_template"] is None


def test_template_file_without_generation_tags_and_rows_it_refuses(tiny_llama, chat_rows, tmp_path):
    from transformers import AutoTokenizer

    from eagle3_runner.common.errors import BadInput
    from eagle3_runner.prepare import prepare

    template = tmp_path / "plain.jinja"
    template.write_text(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('system turns are not supported') }}"
        "{% endif %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    rows = chat_rows[:12]
    data = _jsonl(tmp_path / "d.jsonl", rows)
    with_system = [i + 1 for i, r in enumerate(rows) if r["messages"][0]["role"] == "system"]
    assert with_system and len(with_system) < len(rows)
    with pytest.raises(BadInput) as exc:
        prepare(tiny_llama, data, tmp_path / "o.jsonl", chat_template=str(template))
    for n in with_system:
        assert f"{data}:{n}: the chat template cannot render this conversation: system turns are not supported" in str(exc.value)
    assert not (tmp_path / "o.jsonl").exists()

    r = prepare(tiny_llama, data, tmp_path / "o.jsonl", chat_template=str(template), skip_bad=True)
    assert r.mask_method == "prefix-diff" and r.rows == len(rows) - len(with_system) and r.skipped == len(with_system)
    report = [json.loads(x) for x in r.skipped_report.read_text().splitlines()]
    assert [x["line"] for x in report] == with_system and all(x["file"] == str(data) for x in report)
    tok = AutoTokenizer.from_pretrained(str(tiny_llama))
    kept = [c for i, c in enumerate(rows) if i + 1 not in with_system]
    for (ids, mask), chat in zip(_token_rows(r.output), kept):
        replies = [m["content"] + "<|end|>" for m in chat["messages"] if m["role"] == "assistant"]
        assert [tok.decode(ids[a:b]) for a, b in _spans(mask)] == replies


def test_bad_rows_have_lines_and_reasons_and_skip_bad_reports_them(tiny_llama, chat_rows, tmp_path, capsys):
    from eagle3_runner.cli import main

    good = chat_rows[0]
    lines = [
        json.dumps(good),
        json.dumps({"messages": [{"role": "narrator", "content": "Once"}, {"role": "assistant", "content": "x"}]}),
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  "}]}),
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                                 {"role": "user", "content": "and?"}]}),
        '{"messages": [',
        "",
        json.dumps({"text": "a text row in a chat file"}),
        json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]},
                                 {"role": "assistant", "content": "a cat"}]}),
        json.dumps(chat_rows[1]),
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(lines) + "\n")
    reasons = {
        2: "message 0 has unknown role 'narrator'",
        3: "message 1 (assistant) is empty",
        4: "the conversation ends with a 'user' turn; it must end with an assistant turn",
        5: "not valid JSON",
        7: "expected an object with 'messages' (messages format)",
        8: "message 0 has a content part of type 'image_url'; only text parts are supported",
    }
    out = tmp_path / "o.jsonl"
    assert main(["prepare", "--model", str(tiny_llama), "--data", str(data), "--output", str(out)]) == 3
    err = capsys.readouterr().err
    for n, why in reasons.items():
        assert f"{data}:{n}: {why}" in err
    assert "6 bad rows" in err and "--skip-bad" in err and not out.exists()

    assert main(["prepare", "--model", str(tiny_llama), "--data", str(data), "--output", str(out), "--skip-bad"]) == 0
    report = [json.loads(x) for x in (tmp_path / "o.skipped.jsonl").read_text().splitlines()]
    assert [x["line"] for x in report] == list(reasons)
    assert all(x["reason"].startswith(reasons[x["line"]]) and x["file"] == str(data) for x in report)
    assert len(read_token_rows(out)) == 2


def test_format_forced_and_detected_per_file(tiny_llama, tmp_path):
    from eagle3_runner.common.errors import UsageError
    from eagle3_runner.prepare import prepare

    row = {"text": "Plain words here.", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    data = _jsonl(tmp_path / "d.jsonl", [row])
    auto = prepare(tiny_llama, data, tmp_path / "a.jsonl")
    forced = prepare(tiny_llama, data, tmp_path / "t.jsonl", format="text")
    assert auto.inputs[0].format == "messages" and auto.mask_method == "generation-tags"
    assert forced.inputs[0].format == "text" and forced.masked_tokens == forced.tokens
    with pytest.raises(UsageError):
        prepare(tiny_llama, data, tmp_path / "x.jsonl", format="alpaca")


def test_record_says_what_made_the_tokens(tiny_llama, chat_file, tmp_path):
    import os

    from eagle3_runner.common.formats import tokens_sibling
    from eagle3_runner.prepare import prepare, prepare_is_complete, request

    out = tmp_path / "t.jsonl"
    r = prepare(tiny_llama, chat_file, out, seq_length=128)
    rec = json.loads(r.record.read_text())
    assert rec["request"]["seq_length"] == 128 and rec["request"]["data"][0]["path"] == str(chat_file)
    assert rec["chat_template"]["source"] == "tokenizer" and rec["counts"]["rows"] == 24
    from transformers import AutoTokenizer

    assert tokens_sibling(out, ".template.jinja").read_text() == AutoTokenizer.from_pretrained(str(tiny_llama)).chat_template
    same = request(tiny_llama, chat_file, 128, None, "auto", False, None)
    assert prepare_is_complete(out, same)
    assert not prepare_is_complete(out, request(tiny_llama, chat_file, 128, "chatml", "auto", False, None))
    assert not prepare_is_complete(out, request(tiny_llama, chat_file, 256, None, "auto", False, None))
    st = chat_file.stat()
    os.utime(chat_file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the data changed
    try:
        assert not prepare_is_complete(out, request(tiny_llama, chat_file, 128, None, "auto", False, None))
    finally:
        os.utime(chat_file, ns=(st.st_atime_ns, st.st_mtime_ns))
