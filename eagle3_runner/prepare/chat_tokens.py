"""Rows -> token ids and a loss mask (1 on the tokens the draft learns to predict).

Chat rows are rendered with the chat template set on the tokenizer
(:func:`eagle3_runner.prepare.chat_templates.load_tokenizer`); the mask covers the assistant turns:

* when the template marks assistant turns with ``{% generation %}...{% endgeneration %}``,
  the mask is the tokenizer's own ``return_assistant_tokens_mask``;
* otherwise (fallback) each assistant turn ``k`` is located by diffing token prefixes: the
  conversation up to turn ``k`` rendered with the generation prompt, against the conversation
  including turn ``k``; the tokens the latter adds (the reply and whatever the template closes
  the turn with, e.g. an end-of-turn token) are masked in.  This needs a template whose
  renderings of successive prefixes are token prefixes of each other, which holds for the
  common templates; where it does not, the span starts at the longest common prefix.

Plain text rows are tokenized as they are (the tokenizer's special tokens, e.g. BOS, added),
with the loss on every token.  A row the template refuses or renders without any assistant
token raises ``ValueError`` with the reason (a bad row).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")

Messages = list[dict[str, Any]]


def has_generation_tags(tokenizer: Any) -> bool:
    template = tokenizer.chat_template
    if isinstance(template, dict):  # several named templates: the default one is used
        template = template.get("default", "")
    return bool(template) and bool(GENERATION_TAG.search(template))


def _render(tokenizer: Any, messages: Messages, tools: list | None = None, **kw: Any) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True, **kw)
    return list(out["input_ids"])


def mask_with_generation_tags(tokenizer: Any, messages: Messages, tools: list | None = None,
                              add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
    out = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
        add_generation_prompt=add_generation_prompt,
    )
    return list(out["input_ids"]), [int(bool(m)) for m in out["assistant_masks"]]


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def mask_by_prefix_diff(tokenizer: Any, messages: Messages, tools: list | None = None,
                        add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
    full = _render(tokenizer, messages, tools, add_generation_prompt=add_generation_prompt)
    mask = [0] * len(full)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = _render(tokenizer, messages[:k], tools, add_generation_prompt=True) if k else []
        upto = _render(tokenizer, messages[: k + 1], tools)
        start = _lcp(prompt, upto)
        end = _lcp(upto, full)  # the turn's tokens as they appear in the full rendering
        for pos in range(start, end):
            mask[pos] = 1
    return full, mask


class RowTokenizer:
    """Token ids and loss masks of rows, with one tokenizer and its chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.tagged = bool(tokenizer.chat_template) and has_generation_tags(tokenizer)
        self.method = "generation-tags" if self.tagged else "prefix-diff"

    def chat(self, messages: Messages, tools: list | None = None,
             add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
        to_tokens = mask_with_generation_tags if self.tagged else mask_by_prefix_diff
        try:
            return to_tokens(self.tokenizer, messages, tools, add_generation_prompt)
        except Exception as exc:  # noqa: BLE001 - jinja's raise_exception, missing fields, ...
            raise ValueError(f"the chat template cannot render this conversation: {exc}") from None

    def text(self, text: str) -> tuple[list[int], list[int]]:
        ids = list(self.tokenizer(text)["input_ids"])
        return ids, [1] * len(ids)

    def conversation(self, messages: Messages, tools: list | None = None) -> tuple[list[int], list[int]]:
        """A whole conversation; refused when the template renders no assistant token."""
        ids, mask = self.chat(messages, tools)
        if not any(mask):
            raise ValueError("the chat template renders no assistant token for this conversation")
        return ids, mask

    def prompt_and_reply(self, messages: Messages, tools: list | None, reply: Sequence[int]) -> tuple[list[int], list[int]]:
        """``messages`` rendered with the generation prompt, then ``reply`` verbatim (all in the loss)."""
        ids, mask = self.chat(messages, tools, add_generation_prompt=True)
        return ids + list(reply), mask + [1] * len(reply)
