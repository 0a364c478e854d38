"""Which chat template ``prepare`` renders with: the tokenizer's own, a Jinja file, or a built-in.

Built-ins (``eagle3_runner/templates/*.jinja``) are renditions of the common formats written
for training data: every assistant turn (content, tool calls and the end-of-turn marker) sits in
``{% generation %}`` so the loss mask comes from ``return_assistant_tokens_mask``.  They follow
each family's turn markers but are not byte copies of any model's shipped template (no default
system prompts, no dates); for a chat model that ships a template, its own is the default.

Markers a template writes that the tokenizer does not hold as single tokens (a built-in on a
base model of another family, e.g. ``<|im_start|>`` on a Llama tokenizer) are rendered as text:
the tokenizer splits them into ordinary tokens, consistently in training and in serving with
the same template.  They are logged as a warning and recorded (``markers_as_text``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..common.errors import BadInput, EnvironmentProblem, UsageError
from ..common.model_folder import check_model_folder

logger = logging.getLogger(__name__)

BUILTINS = ("llama-3", "chatml", "deepseek", "kimi")
ALIASES = {"llama3": "llama-3", "llama-3.1": "llama-3", "qwen": "chatml", "deepseek-v3": "deepseek",
           "kimi-k2": "kimi"}
# special-token-like literals: <|...|> (Llama 3, ChatML, Kimi) and <｜...｜> (DeepSeek, fullwidth bars)
MARKER = re.compile(r"<\|[^|<>\s'\"]+\|>|<｜[^｜<>\s'\"]+｜>")
JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.S)
PROBE = "\x00EAGLE3-PROBE\x00"
REASONING_PROBE = "\x00EAGLE3-REASONING\x00"


@dataclass(frozen=True)
class TemplateInfo:
    """The template a run used, as recorded next to its token file."""

    source: str  # "tokenizer", "builtin" or "file"
    name: str  # built-in name, file path, or the model folder
    text: str
    markers_as_text: tuple[str, ...] = field(default=())

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def record(self) -> dict[str, Any]:
        return {"source": self.source, "name": self.name, "sha256": self.sha256,
                "markers_as_text": list(self.markers_as_text)}


def builtin_text(name: str) -> str:
    name = ALIASES.get(name, name)
    return resources.files("eagle3_runner").joinpath("templates", f"{name}.jinja").read_text(encoding="utf-8")


def resolve_template(spec: str) -> tuple[str, str, str]:
    """``(source, name, text)`` for ``--chat-template SPEC``: an existing file, else a built-in name."""
    path = Path(spec).expanduser()
    if path.is_file():
        try:
            return "file", str(path.absolute()), path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"cannot read the chat template {path}: {exc}") from None
    name = ALIASES.get(spec, spec)
    if name in BUILTINS:
        return "builtin", name, builtin_text(name)
    raise UsageError(f"--chat-template {spec!r} is neither a file nor a built-in template "
                     f"({', '.join(BUILTINS)})")


def _own_template(tokenizer: Any) -> str | None:
    template = tokenizer.chat_template
    if isinstance(template, dict):  # several named templates: the default one is used
        template = template.get("default")
    return template or None


def markers_as_text(tokenizer: Any, text: str) -> tuple[str, ...]:
    """Marker literals of the template that the tokenizer splits into several tokens."""
    found = sorted(set(MARKER.findall(JINJA_COMMENT.sub("", text))))
    return tuple(m for m in found if len(tokenizer.encode(m, add_special_tokens=False)) != 1)


def load_tokenizer(model: Path, chat_template: str | None = None) -> tuple[Any, TemplateInfo | None]:
    """The model's tokenizer with the chosen chat template set on it, and what was chosen.

    ``TemplateInfo`` is ``None`` when no template was asked for and the tokenizer has none (plain
    text rows still work; chat rows are refused by the caller)."""
    check_model_folder(model)
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model))
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(f"cannot load the tokenizer of {model}: {exc}") from None
    if chat_template:
        source, name, text = resolve_template(chat_template)
    else:
        text = _own_template(tokenizer)
        if text is None:
            return tokenizer, None
        source, name = "tokenizer", str(Path(model).absolute())
    tokenizer.chat_template = text
    as_text = markers_as_text(tokenizer, text)
    if as_text:
        logger.warning("the chat template's markers %s are not tokens of %s: they are rendered as text",
                       ", ".join(as_text), model)
    return tokenizer, TemplateInfo(source, name, text, as_text)


def no_template_error(model: Path, why: str = "the data has chat rows") -> EnvironmentProblem:
    return EnvironmentProblem(
        f"the tokenizer of {model} has no chat template, and {why}",
        hint=f"pass --chat-template NAME|FILE (built-ins: {', '.join(BUILTINS)}), or give plain "
             '{"text": ...} rows (loss on every token)',
    )


def end_of_turn(tokenizer: Any) -> str | None:
    """The marker the template closes an assistant turn with (e.g. ``<|im_end|>``), or ``None``.

    Found by rendering a probe reply and taking what the template writes right after it: a
    ``<|...|>``-like marker, else the text up to the first whitespace."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": PROBE}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render this has no findable marker
        return None
    if PROBE not in text:
        return None
    tail = text.split(PROBE, 1)[1].lstrip()
    marker = MARKER.match(tail)
    if marker:
        return marker.group(0)
    return tail.split()[0] if tail.split() else None


def _reply_body(tokenizer: Any, message: dict[str, Any]) -> str | None:
    """What the template writes for ``message`` as the assistant's reply, after its generation
    prompt; ``None`` when the reply does not render as that prompt followed by more text."""
    user = [{"role": "user", "content": "hi"}]
    try:
        prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template([*user, message], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render this has no findable form
        return None
    return full[len(prompt):] if full.startswith(prompt) else None


class ReplyParser:
    """The verifier's reply (its decoded tokens, the end-of-turn marker cut off) as the assistant
    message the chat template renders back to the same text, found from the template itself.

    A template may write part of a reply on its own: Qwen3's thinking block ``<think>\\n..\\n</think>\\n\\n``
    from ``reasoning_content``, harmony's ``<|channel|>final<|message|>``.  A verifier trained on
    such renderings generates those parts too; put whole into ``content``, they would be written
    twice when the template renders the turn as history.  Rendering a probe reply (with and
    without a probe ``reasoning_content``) gives the text before the content and, where the
    template renders reasoning, the text around it; a reply is split along them, and kept whole
    in ``content`` when the split does not render back to it."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        body = _reply_body(tokenizer, {"role": "assistant", "content": PROBE}) or ""
        self.head = body.split(PROBE, 1)[0] if PROBE in body else ""
        both = _reply_body(tokenizer, {"role": "assistant", "content": PROBE, "reasoning_content": REASONING_PROBE})
        self.reasoning: tuple[str, str] | None = None
        if both and REASONING_PROBE in both and PROBE in both.split(REASONING_PROBE, 1)[1]:
            before, rest = both.split(REASONING_PROBE, 1)
            self.reasoning = (before, rest.split(PROBE, 1)[0])

    def record(self) -> dict[str, Any] | None:
        """The forms replies are split along (``None``: the template writes nothing of a reply itself)."""
        if not self.head and self.reasoning is None:
            return None
        return {"head": self.head, "reasoning": list(self.reasoning) if self.reasoning else None}

    def message(self, text: str) -> dict[str, str]:
        """``{"content": ...}``, with ``reasoning_content`` when the reply holds a reasoning part."""
        found = {"content": text}
        if self.reasoning and text.startswith(self.reasoning[0]) and self.reasoning[1] in text[len(self.reasoning[0]):]:
            reasoning, content = text[len(self.reasoning[0]):].split(self.reasoning[1], 1)
            found = {"reasoning_content": reasoning, "content": content} if reasoning else {"content": content}
        elif self.head and text.startswith(self.head):
            found = {"content": text[len(self.head):]}
        if found["content"] != text:
            body = _reply_body(self.tokenizer, {"role": "assistant", **found})
            if body is None or not body.startswith(text):
                return {"content": text}
        return found
