"""The built-in chat templates and --chat-template resolution, on the tiny Llama's tokenizer."""

from __future__ import annotations

import json

import pytest

from eagle3_runner.prepare.chat_templates import (
    BUILTINS, JINJA_COMMENT, MARKER, builtin_text, end_of_turn, load_tokenizer, resolve_template,
)
from eagle3_runner.prepare.chat_tokens import RowTokenizer, has_generation_tags, mask_by_prefix_diff, mask_with_generation_tags
from eagle3_runner.common.errors import UsageError

EOT = {"llama-3": "<|eot_id|>", "chatml": "<|im_end|>", "deepseek": "<｜end▁of▁sentence｜>", "kimi": "<|im_end|>"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
TOOL_CHAT = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    {"role": "assistant", "content": "It is sunny in Paris."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You are welcome."},
]


def _with_markers(tiny_llama, name):
    """The tiny tokenizer with the built-in set and its markers added as special tokens (a model
    of that family), so every marker is one token."""
    tok, info = load_tokenizer(tiny_llama, name)
    markers = sorted(set(MARKER.findall(JINJA_COMMENT.sub("", builtin_text(name)))))
    tok.add_special_tokens({"additional_special_tokens": markers})
    return tok, info


def _spans(ids, mask):
    spans, cur = [], []
    for t, m in zip([*ids, None], [*mask, 0]):
        if m:
            cur.append(t)
        elif cur:
            spans.append(cur)
            cur = []
    return spans


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_masks_exactly_the_assistant_turns(tiny_llama, chat_rows, name):
    tok, info = _with_markers(tiny_llama, name)
    assert info.source == "builtin" and info.name == name and has_generation_tags(tok)
    assert end_of_turn(tok) == EOT[name]
    eot = EOT[name]
    for chat in [*(c["messages"] for c in chat_rows[:8])]:
        ids, mask = mask_with_generation_tags(tok, chat)
        replies = [m["content"].strip() + eot for m in chat if m["role"] == "assistant"]
        assert [tok.decode(s) for s in _spans(ids, mask)] == replies
        # the prefix-diff fallback finds the same turns; it may add what the template writes after
        # the end-of-turn marker (chatml's newline), never less
        ids2, mask2 = mask_by_prefix_diff(tok, chat)
        assert ids2 == ids and all(b >= a for a, b in zip(mask, mask2))
        assert [tok.decode(s).rstrip() for s in _spans(ids2, mask2)] == replies
        # the unmasked part holds every system/user turn
        rest = tok.decode([t for t, m in zip(ids, mask) if not m])
        assert all(m["content"].strip() in rest for m in chat if m["role"] != "assistant")


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_tool_calls_pass_through(tiny_llama, name):
    tok, _ = _with_markers(tiny_llama, name)
    text = tok.apply_chat_template(TOOL_CHAT, tools=TOOLS, tokenize=False)
    assert "get_weather" in text.split("What is the weather")[0]  # the tools are declared before the question
    assert '"city": "Paris"' in text and "sunny" in text
    ids, mask = RowTokenizer(tok).conversation(TOOL_CHAT, TOOLS)
    spans = [tok.decode(s) for s in _spans(ids, mask)]
    assert len(spans) == 3 and "get_weather" in spans[0] and '"city": "Paris"' in spans[0]
    assert spans[1:] == ["It is sunny in Paris." + EOT[name], "You are welcome." + EOT[name]]
    assert "sunny" not in spans[0]  # the tool result is not in the loss


def test_markers_missing_from_a_base_tokenizer_are_rendered_as_text(tiny_llama, caplog):
    with caplog.at_level("WARNING"):
        tok, info = load_tokenizer(tiny_llama, "chatml")
    assert info.markers_as_text == ("<|im_end|>", "<|im_start|>")
    assert "<|im_end|>, <|im_start|>" in caplog.text
    ids, mask = RowTokenizer(tok).conversation([{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}])
    assert tok.decode(ids) == "<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
    assert len(ids) > len(tok.encode("Hi. Hello.", add_special_tokens=False)) + 4  # markers split into pieces
    assert tok.decode([t for t, m in zip(ids, mask) if m]) == "Hello.<|im_end|>"
    _, own = load_tokenizer(tiny_llama)  # the tiny template's markers are the tokenizer's own
    assert own.source == "tokenizer" and own.markers_as_text == ()


def test_template_file_and_unknown_names(tmp_path, tiny_llama):
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    source, name, text = resolve_template(str(path))
    assert (source, name, text) == ("file", str(path), path.read_text())
    tok, info = load_tokenizer(tiny_llama, str(path))
    assert tok.chat_template == path.read_text() and info.sha256 and not has_generation_tags(tok)
    assert resolve_template("qwen")[:2] == ("builtin", "chatml")  # alias
    with pytest.raises(UsageError, match="neither a file nor a built-in"):
        resolve_template("no-such-template")
