"""``prepare``'s input: rows of chat or plain text from JSON lines, Parquet or a ``datasets`` folder.

Containers (by path): a folder is a Hugging Face ``datasets`` folder (``save_to_disk``; of a
``DatasetDict`` the ``train`` split, or its only one), ``*.parquet`` is Parquet, anything else
JSON lines.  Row formats, detected per file from the first row that has one of their keys
(``--format`` forces one):

* ``messages``: OpenAI chat, ``{"messages": [{"role", "content", "tool_calls"?, ...}], "tools"?}``;
* ``sharegpt``: ``{"conversations": [{"from": "human", "value": ...}, ...], "system"?, "tools"?}``
  (``from``: human/user -> user; gpt/assistant/chatgpt/bing/bard/model -> assistant; system;
  tool/function/observation -> tool results; function_call -> an assistant tool call);
* ``text``: ``{"text": ...}``, tokenized as it is, loss on every token.

Every row is checked; a bad one is a :class:`BadRow` with its line (JSON lines) or 1-based row
number (Parquet, ``datasets``) and the reason.  The caller stops on them or skips them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import BadInput, EnvironmentProblem, UsageError
from ..common.formats import _summarize, scan_checked_lines

FORMATS = ("messages", "sharegpt", "text")
FORMAT_KEYS = {"messages": "messages", "sharegpt": "conversations", "text": "text"}
ROLES = ("system", "user", "assistant", "tool", "function")
SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bing": "assistant",
    "bard": "assistant", "model": "assistant",
    "system": "system",
    "tool": "tool", "function": "tool", "observation": "tool",
}
PASSED_KEYS = ("tool_calls", "tool_call_id", "name", "reasoning_content")  # kept for the template


@dataclass(frozen=True)
class SourceRow:
    source: str  # the input file or folder
    line: int  # 1-based line (JSON lines) or row number (Parquet, datasets)
    messages: list[dict[str, Any]] | None = None  # chat rows
    text: str | None = None  # plain text rows
    tools: list[Any] | None = None

    @property
    def is_chat(self) -> bool:
        return self.messages is not None


@dataclass(frozen=True)
class BadRow:
    source: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}"

    def record(self) -> dict[str, Any]:
        return {"file": self.source, "line": self.line, "reason": self.reason}


@dataclass
class InputInfo:
    path: str
    container: str  # "jsonl", "parquet" or "datasets"
    format: str | None  # None: no row had a recognisable format
    rows: int = 0
    bad: int = 0


@dataclass
class ReadResult:
    rows: list[SourceRow] = field(default_factory=list)
    bad: list[BadRow] = field(default_factory=list)
    inputs: list[InputInfo] = field(default_factory=list)


def bad_rows_error(bad: Sequence[BadRow], hint: str | None = "pass --skip-bad to skip them") -> BadInput:
    return BadInput(_summarize([str(b) for b in bad], "bad rows"), hint=hint)


# --- one row ---------------------------------------------------------------------------------


def _text_content(content: Any, k: int) -> str | None:
    """A message's content as a string (text parts joined); ``None`` when absent."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"message {k} has a content part of type {kind!r}; only text parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise ValueError(f"message {k}: 'content' must be a string or a list of text parts")


def _tool_calls(calls: Any, k: int) -> list[dict[str, Any]] | None:
    if calls is None or calls == []:
        return None
    if not isinstance(calls, list):
        raise ValueError(f"message {k}: 'tool_calls' must be a list")
    for call in calls:
        f = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or \
                not isinstance(f.get("arguments"), (str, dict)):
            raise ValueError(f"message {k}: every tool call needs a function 'name' and 'arguments'")
    return calls


def _message(m: Any, k: int) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise ValueError(f"message {k} is not an object")
    role = m.get("role")
    if not isinstance(role, str):
        raise ValueError(f"message {k} has no string 'role'")
    if role not in ROLES:
        raise ValueError(f"message {k} has unknown role {role!r} (known: {', '.join(ROLES)})")
    content = _text_content(m.get("content"), k)
    calls = _tool_calls(m.get("tool_calls"), k) if role == "assistant" else None
    if not calls and (content is None or not content.strip()):
        raise ValueError(f"message {k} ({role}) is empty")
    out: dict[str, Any] = {"role": role, "content": content}
    for key in PASSED_KEYS:
        if m.get(key) is not None:
            out[key] = m[key]
    if calls:
        out["tool_calls"] = calls
    return out


def _conversation(msgs: Any, key: str, open_ended: bool = False) -> list[dict[str, Any]]:
    """``open_ended`` (the answers are regenerated): a conversation may end with the user's turn,
    and an empty assistant turn is appended for the verifier to write."""
    if not isinstance(msgs, list) or not msgs:
        raise ValueError(f"'{key}' must be a non-empty list")
    out = [_message(m, k) for k, m in enumerate(msgs)]
    if open_ended and out[-1]["role"] == "user":
        return [*out, {"role": "assistant", "content": ""}]
    if out[-1]["role"] != "assistant":
        raise ValueError(f"the conversation ends with a {out[-1]['role']!r} turn; it must end with an assistant turn")
    return out


def _tools(tools: Any) -> list[Any] | None:
    if isinstance(tools, str):  # ShareGPT exports often store them as a JSON string
        try:
            tools = json.loads(tools) if tools.strip() else None
        except json.JSONDecodeError as exc:
            raise ValueError(f"'tools' is a string but not JSON ({exc.msg})") from None
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise ValueError("'tools' must be a list")
    return tools


def _sharegpt_turn(turn: Any, k: int) -> dict[str, Any]:
    if not isinstance(turn, dict):
        raise ValueError(f"turn {k} is not an object")
    if "from" not in turn and "role" in turn:  # some exports use role/content inside 'conversations'
        return turn
    who, value = turn.get("from"), turn.get("value")
    if who == "function_call":  # an assistant tool call, its value the JSON {"name", "arguments"}
        try:
            call = json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError as exc:
            raise ValueError(f"turn {k}: a function_call value must be JSON ({exc.msg})") from None
        calls = call if isinstance(call, list) else [call]
        return {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": c} for c in calls]}
    if who not in SHAREGPT_ROLES:
        known = ", ".join([*SHAREGPT_ROLES, "function_call"])
        raise ValueError(f"turn {k} has unknown 'from' value {who!r} (known: {known})")
    return {"role": SHAREGPT_ROLES[who], "content": value}


def parse_row(obj: Any, fmt: str, source: str, line: int, open_ended: bool = False) -> SourceRow:
    """One input object as a :class:`SourceRow` of format ``fmt``; ``ValueError`` says what is wrong."""
    key = FORMAT_KEYS[fmt]
    if not isinstance(obj, dict) or obj.get(key) is None:
        raise ValueError(f"expected an object with {key!r} ({fmt} format)")
    if fmt == "text":
        if not isinstance(obj["text"], str) or not obj["text"].strip():
            raise ValueError("'text' must be a non-empty string")
        return SourceRow(source, line, text=obj["text"])
    if fmt == "sharegpt":
        turns = obj["conversations"]
        if not isinstance(turns, list):
            raise ValueError("'conversations' must be a list")
        msgs = [_sharegpt_turn(t, k) for k, t in enumerate(turns)]
        if isinstance(obj.get("system"), str) and obj["system"].strip():
            msgs.insert(0, {"role": "system", "content": obj["system"]})
        return SourceRow(source, line, messages=_conversation(msgs, "conversations", open_ended),
                         tools=_tools(obj.get("tools")))
    return SourceRow(source, line, messages=_conversation(obj["messages"], "messages", open_ended),
                     tools=_tools(obj.get("tools")))


def detect_format(obj: Any) -> str | None:
    if isinstance(obj, dict):
        for fmt, key in FORMAT_KEYS.items():
            if obj.get(key) is not None:
                return fmt
    return None


class _FileParser:
    """Checks one file's objects; the format is fixed by ``forced`` or by the first row that shows one."""

    def __init__(self, source: str, forced: str | None, open_ended: bool = False) -> None:
        self.source, self.format, self.open_ended = source, forced, open_ended

    def check(self, obj: Any) -> str | None:
        if self.format is None:
            self.format = detect_format(obj)
            if self.format is None:
                return "no 'messages', 'conversations' or 'text' key (or pass --format)"
        try:
            parse_row(obj, self.format, self.source, 0, self.open_ended)
        except ValueError as exc:
            return str(exc)
        return None

    def row(self, line: int, obj: Any) -> SourceRow:
        assert self.format is not None
        return parse_row(obj, self.format, self.source, line, self.open_ended)


# --- containers ------------------------------------------------------------------------------


def container_of(path: Path) -> str:
    if path.is_dir():
        return "datasets"
    return "parquet" if path.suffix.lower() == ".parquet" else "jsonl"


def _parquet_records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise EnvironmentProblem("reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        pf = pq.ParquetFile(str(path))
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read {path} as Parquet: {exc}") from None
    for batch in pf.iter_batches(batch_size=1024):
        yield from batch.to_pylist()


def _dataset_records(path: Path) -> Iterable[dict[str, Any]]:
    try:
        from datasets import Dataset, DatasetDict, load_from_disk
    except ModuleNotFoundError:
        raise EnvironmentProblem("reading a datasets folder needs the datasets package (pip install datasets)") from None
    try:
        ds = load_from_disk(str(path))
    except (OSError, ValueError, FileNotFoundError) as exc:
        raise BadInput(f"{path} is not a datasets folder saved with save_to_disk: {exc}") from None
    if isinstance(ds, DatasetDict):
        splits = list(ds)
        if "train" not in ds and len(splits) != 1:
            raise UsageError(f"{path} holds the splits {splits}: save the one to use with save_to_disk")
        ds = ds["train" if "train" in ds else splits[0]]
    assert isinstance(ds, Dataset)
    return ds


def _read_one(path: Path, fmt: str | None, result: ReadResult, open_ended: bool) -> None:
    container = container_of(path)
    parser = _FileParser(str(path), fmt, open_ended)
    if container == "jsonl":
        accepted, bad = scan_checked_lines(path, parser.check, blank_ok=True)
    else:
        if not path.exists():
            raise BadInput(f"cannot read {path}: no such file")
        records = _parquet_records(path) if container == "parquet" else _dataset_records(path)
        accepted, bad = [], []
        for n, obj in enumerate(records, start=1):
            why = parser.check(obj)
            if why:
                bad.append((n, why))
            else:
                accepted.append((n, obj))
    rows = [parser.row(n, obj) for n, obj in accepted]
    result.rows.extend(rows)
    result.bad.extend(BadRow(str(path), n, why) for n, why in bad)
    result.inputs.append(InputInfo(str(path), container, parser.format, len(rows), len(bad)))


def read_rows(paths: Path | Sequence[Path], fmt: str = "auto", open_ended: bool = False) -> ReadResult:
    """Every row of every input, with the bad ones set aside (the caller stops or skips);
    ``open_ended``: conversations may end with a user turn (prompts to regenerate answers for)."""
    if fmt not in ("auto", *FORMATS):
        raise UsageError(f"--format must be auto or one of {', '.join(FORMATS)}, got {fmt!r}")
    result = ReadResult()
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        _read_one(Path(path), None if fmt == "auto" else fmt, result, open_ended)
    return result
