"""A regenerated turn, as the next prompt's history holds it, renders back to the verifier's own
ids, for the tiny verifiers' chat templates (Llama's, Qwen3's with its thinking block, gpt-oss's
harmony).  No model and no vLLM: the "verifier's" reply is what a verifier trained on the
template's renderings generates after the generation prompt, i.e. the template's own tokens.

Before :class:`~eagle3_runner.prepare.chat_templates.ReplyParser`, Qwen3's history turn held its
``<think>\\n\\n</think>\\n\\n`` twice (once generated, once written by the template), so the held-out
turns were no longer the verifier's greedy continuation of their prompt and ``serve-check``
walked other tokens than ``eagle3 eval`` (qwen3: 7.4 points apart at position 3)."""

from __future__ import annotations

import pytest

from eagle3_runner.prepare.chat_templates import ReplyParser
from eagle3_runner.prepare.chat_tokens import RowTokenizer
from eagle3_runner.prepare.readers import SourceRow
from eagle3_runner.prepare.regenerate import Turn, _Job, reply_of, stop_tokens

FIRST = "The cat likes the door every day."
SECOND = "A small bird opens the map at night."


@pytest.fixture(scope="module", params=["llama", "qwen3", "gpt_oss"])
def tokenizer(request, tmp_path_factory):
    from transformers import AutoTokenizer

    from eagle3_runner.tiny import build_tokenizer
    from eagle3_runner.tiny.arch import (
        HARMONY_MARKERS,
        HARMONY_TEMPLATE,
        _qwen_tokenizer,
    )

    dest = tmp_path_factory.mktemp(request.param)
    if request.param == "qwen3":
        _qwen_tokenizer(dest)
    elif request.param == "gpt_oss":
        build_tokenizer(dest, markers=HARMONY_MARKERS, eos="<|return|>", chat_template=HARMONY_TEMPLATE)
    else:
        build_tokenizer(dest)
    return AutoTokenizer.from_pretrained(str(dest))


def _generated(rt: RowTokenizer, messages: list[dict], reply: dict) -> list[int]:
    """The ids a verifier trained on the template's renderings generates for ``reply``: the turn's
    tokens after the generation prompt, as the template writes a conversation's last turn."""
    prompt = rt.chat(messages, add_generation_prompt=True)[0]
    full = rt.chat([*messages, {"role": "assistant", **reply}])[0]
    assert full[: len(prompt)] == prompt
    return full[len(prompt):]


def _spans(ids: list[int], mask: list[int]) -> list[list[int]]:
    spans: list[list[int]] = []
    for i, (t, m) in enumerate(zip(ids, mask)):
        if m:
            if i == 0 or not mask[i - 1]:
                spans.append([])
            spans[-1].append(t)
    return spans


@pytest.mark.parametrize("reasoning", ["", "I should answer briefly."])
def test_history_turn_renders_back_to_the_generated_ids(tokenizer, tmp_path, reasoning):
    rt = RowTokenizer(tokenizer)
    stop_ids, stop = stop_tokens(tokenizer, tmp_path)
    user = [{"role": "user", "content": "Can you tell me about tea?"}]
    reply = {"content": FIRST, **({"reasoning_content": reasoning} if reasoning else {})}
    ids = _generated(rt, user, reply)
    if ids[-1] not in stop_ids:  # harmony: the reply ends with <|return|>, the stop token
        pytest.fail(f"the turn ends with {ids[-1]}, not a stop token {stop_ids}")
    row = SourceRow("chat", 1, [*user, {"role": "assistant", "content": "old"},
                                {"role": "user", "content": "Why do people like books?"},
                                {"role": "assistant", "content": "old"}])
    job = _Job(row, "k")
    job.accept(Turn(1, ids, "stop"), reply_of(ReplyParser(tokenizer), Turn(1, ids, "stop"), set(stop_ids), stop))
    assert job.messages[1]["content"] == FIRST
    if "reasoning_content" in tokenizer.chat_template:  # Llama's template writes no reasoning
        assert job.messages[1].get("reasoning_content", "") == reasoning
    job.messages[3] = {"role": "assistant", "content": SECOND}
    full, mask = rt.conversation(job.messages)
    history = _spans(full, mask)[0]
    # the history turn is the verifier's ids; harmony writes a turn that is not the last with
    # <|end|> where the verifier stopped on <|return|>: its last token only
    assert history[:-1] == ids[:-1]
    assert tokenizer.decode(history[-1:]) in ("<|end|>", tokenizer.decode(ids[-1:]))

