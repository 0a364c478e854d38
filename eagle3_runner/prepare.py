"""``eagle3 prepare``: chat rows -> token rows with a loss mask on assistant tokens.

Input: JSON lines ``{"messages": [{"role": ..., "content": ...}, ...]}``.  Each row is
rendered with the model tokenizer's chat template.

Loss mask:

* when the template marks assistant turns with ``{% generation %}...{% endgeneration %}``,
  the mask is the tokenizer's own ``return_assistant_tokens_mask``;
* otherwise (fallback) each assistant turn ``k`` is located by diffing token prefixes: the
  conversation up to turn ``k`` rendered with the generation prompt, against the conversation
  including turn ``k``; the tokens the latter adds (the reply and whatever the template closes
  the turn with, e.g. an end-of-turn token) are masked in.  This needs a template whose
  renderings of successive prefixes are token prefixes of each other, which holds for the
  common templates; where it does not, the span starts at the longest common prefix.

Rows are truncated to ``--seq-length`` tokens.  Output rows are ``{"input_ids", "loss_mask"}``;
token frequencies of the masked-in tokens go to ``TOKENS.freq.json`` for ``eagle3 vocab``.
Malformed rows stop the step (exit 3) with every offending line number; nothing is written.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import atomic_open
from .errors import BadInput, EnvironmentProblem
from .formats import freq_path_for, read_checked_lines, write_freq

logger = logging.getLogger(__name__)

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


@dataclass(frozen=True)
class PrepareResult:
    output: Path
    freq: Path
    rows: int
    tokens: int
    masked_tokens: int
    truncated: int
    mask_method: str  # "generation-tags" or "prefix-diff"


def read_chat_rows(path: Path) -> list[list[dict[str, str]]]:
    """Read and check every chat row; all problems are reported at once with line numbers."""
    rows = read_checked_lines(path, _check_chat_row, "chat rows", blank_ok=True)  # blank lines allowed
    return [[{"role": m["role"], "content": m["content"]} for m in obj["messages"]] for _, obj in rows]


def _check_chat_row(obj: Any) -> str | None:
    if not isinstance(obj, dict) or "messages" not in obj:
        return "expected an object with a 'messages' list"
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        return "'messages' must be a non-empty list"
    for k, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            return f"message {k} must be an object with string 'role' and 'content'"
    return None


def has_generation_tags(tokenizer: Any) -> bool:
    template = tokenizer.chat_template
    if isinstance(template, dict):  # several named templates: the default one is used
        template = template.get("default", "")
    return bool(template) and bool(GENERATION_TAG.search(template))


def _render(tokenizer: Any, messages: list[dict[str, str]], **kw: Any) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kw)
    return list(out["input_ids"])


def mask_with_generation_tags(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return list(out["input_ids"]), [int(bool(m)) for m in out["assistant_masks"]]


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def mask_by_prefix_diff(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    full = _render(tokenizer, messages)
    mask = [0] * len(full)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = _render(tokenizer, messages[:k], add_generation_prompt=True) if k else []
        upto = _render(tokenizer, messages[: k + 1])
        start = _lcp(prompt, upto)
        end = _lcp(upto, full)  # the turn's tokens as they appear in the full rendering
        for pos in range(start, end):
            mask[pos] = 1
    return full, mask


def prepare(model: Path, data: Path, output: Path, seq_length: int = 2048) -> PrepareResult:
    if seq_length < 2:
        raise BadInput(f"--seq-length must be at least 2, got {seq_length}")
    convs = read_chat_rows(data)
    try:
        from transformers import AutoConfig, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model))
        vocab_size = int(getattr(AutoConfig.from_pretrained(str(model)), "vocab_size", None) or len(tokenizer))
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(f"cannot load the tokenizer/config of {model}: {exc}") from None
    if not tokenizer.chat_template:
        raise EnvironmentProblem(f"the tokenizer of {model} has no chat template")
    tagged = has_generation_tags(tokenizer)
    method = "generation-tags" if tagged else "prefix-diff"
    to_tokens = mask_with_generation_tags if tagged else mask_by_prefix_diff
    logger.info("tokenizing %d conversations (assistant mask by %s)", len(convs), method)

    freq: Counter[int] = Counter()
    n_tokens = n_masked = n_truncated = n_unmasked_rows = 0
    output = Path(output)
    with atomic_open(output, "w", encoding="utf-8") as fh:
        for messages in _progress(convs):
            ids, mask = to_tokens(tokenizer, messages)
            if len(ids) > seq_length:
                ids, mask = ids[:seq_length], mask[:seq_length]
                n_truncated += 1
            masked = [t for t, m in zip(ids, mask) if m]
            if not masked:
                n_unmasked_rows += 1
            freq.update(masked)
            n_tokens += len(ids)
            n_masked += len(masked)
            fh.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
    freq_file = freq_path_for(output)
    write_freq(freq_file, dict(freq), vocab_size)
    if n_unmasked_rows:
        logger.warning("%d rows have no assistant token (after truncation); they add no loss", n_unmasked_rows)
    return PrepareResult(output, freq_file, len(convs), n_tokens, n_masked, n_truncated, method)


def _progress(items: list) -> Any:
    from .progress import bar

    return bar(None, "prepare", "row", iterable=items, leave=False)
