"""Replace the assistant turns of chat rows by the verifier's own responses (vLLM's ``LLM``).

Drafts trained on the verifier's own answers are accepted far more often than drafts trained on
a dataset's answers.  For every chat row, each assistant turn is regenerated given the
conversation so far (the earlier turns already regenerated): turn k of every row of a batch goes
to ``LLM.generate`` at once, then turn k+1.  Prompts are token ids, rendered by the chat template
with the generation prompt; sampling is greedy by default.

* Assistant turns with tool calls are kept as they are (the tool results that follow answer them).
* A response stops at the template's end-of-turn marker (found by rendering a probe reply), the
  tokenizer's and generation config's EOS, or ``max_new_tokens``; one that hits
  ``max_new_tokens`` is kept and counted (``truncated``).
* Token ids: the last turn keeps the verifier's ids verbatim (``RegeneratedRow.reply``; prepare
  writes the row as the exact prompt the verifier saw, then those ids).  Earlier turns enter the
  conversation as decoded text, re-rendered and re-tokenized for the next prompt, as a server
  re-renders history; ``retokenized_differs`` counts the turns whose text re-encodes to other ids.
  The text is split as the template renders a reply (:class:`~.chat_templates.ReplyParser`): a
  thinking block the verifier generated goes to ``reasoning_content``, a header the template
  writes itself (harmony's final channel) is cut off, so that the template does not write them
  twice and the turn renders back to the verifier's own ids.
* A turn whose prompt has ``max_prompt_tokens`` tokens (prepare: ``--seq-length``, beyond which
  nothing survives truncation) or does not fit ``max_model_len`` is dropped with the rest of the
  conversation; the row is cut back to its last assistant turn before it, or dropped.
* Resumable: finished rows are appended, a batch at a time, to a side file
  (:mod:`eagle3_runner.prepare.regen_store`); a re-run with the same settings skips them, so a killed run
  loses at most the batch in flight.  Rows are keyed by a hash of their content; a row that had
  turns dropped for length is redone when the prompt limit grows.

Engine: :mod:`eagle3_runner.prepare.engine` (its own, or one shared with synthesis).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .chat_templates import ReplyParser, end_of_turn, load_tokenizer, no_template_error
from .chat_tokens import RowTokenizer
from ..common.errors import UsageError
from .engine import EngineOptions, LazyEngine, capped_model_len
from .readers import SourceRow
from .regen_store import SideFile

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegenerateOptions:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0  # sampling: request seed = seed + a hash of the row, so resumes and batching agree
    batch_size: int = 1024  # rows whose turns go to the engine together; the side file grows per batch
    chat_template: str | None = None  # as prepare's --chat-template (when no tokenizer is passed)
    stop_token_ids: tuple[int, ...] = ()  # besides the end-of-turn marker and EOS
    max_prompt_tokens: int | None = None
    max_model_len: int | None = None  # default: prompt limit + max_new_tokens, rounded up to 32
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None


@dataclass(frozen=True)
class Turn:
    index: int  # the message's index in the conversation
    ids: list[int]  # the verifier's tokens, with the stop token when it stopped on one
    finish: str  # "stop" or "length"


@dataclass(frozen=True)
class RegeneratedRow:
    row: SourceRow  # messages regenerated (None: dropped, see above); text rows unchanged
    turns: tuple[Turn, ...] = ()
    error: str | None = None  # the template could not render a prompt: a bad row

    @property
    def reply(self) -> list[int] | None:
        """The verifier's ids for the conversation's last message, when it regenerated it."""
        msgs = self.row.messages
        if msgs and self.turns and self.turns[-1].index == len(msgs) - 1:
            return self.turns[-1].ids
        return None


@dataclass
class RegenerateResult:
    rows: list[RegeneratedRow]
    side_file: Path
    regenerated: int = 0  # rows done by this call
    reused: int = 0  # rows taken from the side file
    turns: int = 0  # regenerated turns in all rows
    tokens: int = 0  # generated tokens in all rows
    truncated: int = 0  # turns that hit max_new_tokens
    retokenized_differs: int = 0  # turns whose decoded text re-encodes to other ids
    dropped_turns: int = 0
    dropped_rows: int = 0
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)  # stop strings (markers rendered as text)
    dtype: str | None = None  # what the engine ran these rows in (several: comma-separated)
    seconds: float = 0.0  # generation only, without the engine's start

    def record(self) -> dict[str, Any]:
        keep = ("regenerated", "reused", "turns", "tokens", "truncated", "retokenized_differs", "dropped_turns",
                "dropped_rows", "stop_token_ids", "stop", "dtype", "seconds")
        return {"side_file": str(self.side_file), **{k: getattr(self, k) for k in keep}}


def row_key(row: SourceRow) -> str:
    blob = json.dumps({"messages": row.messages, "tools": row.tools}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _regenerable(messages: list[dict[str, Any]], start: int) -> list[int]:
    return [k for k in range(start, len(messages)) if messages[k]["role"] == "assistant" and not messages[k].get("tool_calls")]


def stop_tokens(tokenizer: Any, model: Path, extra: Sequence[int] = ()) -> tuple[list[int], list[str]]:
    """Token ids and strings that end a response: the end-of-turn marker, EOS ids, ``extra``."""
    ids = set(extra)
    strings: list[str] = []
    marker = end_of_turn(tokenizer)
    if marker:
        enc = tokenizer.encode(marker, add_special_tokens=False)
        if len(enc) == 1:
            ids.add(enc[0])
        else:  # a marker rendered as text: vLLM matches it on the detokenized output
            strings.append(marker)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    try:
        from transformers import GenerationConfig

        eos = GenerationConfig.from_pretrained(str(model)).eos_token_id
        ids.update([eos] if isinstance(eos, int) else eos or [])
    except (OSError, ValueError):
        pass  # no generation_config.json
    return sorted(ids), strings


def _content(tokenizer: Any, turn: Turn, stop_ids: set[int], stop: list[str]) -> tuple[str, bool]:
    """The reply as text for the next prompt, and whether it re-encodes to other ids."""
    body = turn.ids[:-1] if turn.finish == "stop" and turn.ids and turn.ids[-1] in stop_ids else turn.ids
    text = tokenizer.decode(body, skip_special_tokens=False)
    if turn.finish == "stop":
        for s in stop:
            if s in text:
                text = text[: text.index(s)]
    differs = tokenizer.encode(text, add_special_tokens=False) != list(body)
    return text, differs


def reply_of(parser: ReplyParser, turn: Turn, stop_ids: set[int], stop: list[str]) -> dict[str, str]:
    """The message fields of a generated turn, as the next prompt's history holds it."""
    return parser.message(_content(parser.tokenizer, turn, stop_ids, stop)[0])


class _Job:
    """One row's regeneration: its messages so far and the turns done."""

    def __init__(self, row: SourceRow, key: str) -> None:
        self.row, self.key = row, key
        self.messages: list[dict[str, Any]] | None = [dict(m) for m in row.messages or []]
        self.turns: list[Turn] = []
        self.next = 0
        self.dropped = 0
        self.error: str | None = None

    def pending(self) -> int | None:
        if self.messages is None or self.error:
            return None
        todo = _regenerable(self.messages, self.next)
        return todo[0] if todo else None

    def accept(self, turn: Turn, reply: dict[str, str]) -> None:
        """Turn ``turn.index`` becomes ``reply`` (its ``content``, and ``reasoning_content`` if any)."""
        assert self.messages is not None
        msg = {k: v for k, v in self.messages[turn.index].items() if k != "reasoning_content"}
        self.messages[turn.index] = {**msg, **reply}
        self.turns.append(turn)
        self.next = turn.index + 1

    def cut(self, at: int) -> None:
        """Drop turn ``at`` and everything after it; end at the last assistant turn before it."""
        assert self.messages is not None
        self.dropped = len(_regenerable(self.messages, at))
        before = [k for k in range(at) if self.messages[k]["role"] == "assistant"]
        self.messages = self.messages[: before[-1] + 1] if before else None

    def entry(self, dtype: str | None, limit: int | None) -> dict[str, Any]:
        return {"key": self.key, "messages": self.messages, "dropped": self.dropped, "dtype": dtype, "limit": limit,
                "turns": [{"index": t.index, "ids": t.ids, "finish": t.finish} for t in self.turns]}


def _still_valid(entry: dict[str, Any], limit: int | None) -> bool:
    """An entry that dropped turns for length is redone when the prompt limit is now larger."""
    made = entry.get("limit")
    return not entry.get("dropped") or (made is not None and limit is not None and limit <= made)


def _from_entry(row: SourceRow, entry: dict[str, Any]) -> RegeneratedRow:
    turns = tuple(Turn(int(t["index"]), [int(i) for i in t["ids"]], str(t["finish"])) for t in entry["turns"])
    return RegeneratedRow(replace(row, messages=entry["messages"]), turns)


def _chunks(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def regenerate(model: Path, rows: Sequence[SourceRow], out: Path, options: RegenerateOptions = RegenerateOptions(),
               tokenizer: Any = None, engine: LazyEngine | None = None) -> RegenerateResult:
    """Regenerate the chat rows of ``rows`` (text rows pass through), resumable through ``out``;
    ``engine``: a shared engine (its ``max_model_len`` must hold the prompt limit + new tokens)."""
    _check(options)
    model = Path(model)
    if tokenizer is None:
        tokenizer, info = load_tokenizer(model, options.chat_template)
        if info is None and any(r.is_chat for r in rows):
            raise no_template_error(model)
    rt = RowTokenizer(tokenizer)
    stop_ids, stop = stop_tokens(tokenizer, model, options.stop_token_ids)
    parser = ReplyParser(tokenizer)
    side = SideFile(out, _settings(model, tokenizer, options, stop_ids, stop, parser))
    done = side.load()
    result = RegenerateResult([], Path(out), stop_token_ids=stop_ids, stop=stop)
    jobs: dict[int, _Job] = {}
    used: list[dict[str, Any]] = []  # side-file entries of the rows reused
    slots: list[RegeneratedRow | None] = []
    for i, row in enumerate(rows):
        if not row.is_chat:
            slots.append(RegeneratedRow(row))
            continue
        key = row_key(row)
        if key in done and _still_valid(done[key], options.max_prompt_tokens):
            slots.append(_from_entry(row, done[key]))
            used.append(done[key])
        else:
            slots.append(None)
            jobs[i] = _Job(row, key)
    if jobs:
        _run(model, rt, parser, list(jobs.values()), side, options, stop_ids, stop, result, engine)
        for i, job in jobs.items():
            slots[i] = RegeneratedRow(replace(job.row, messages=job.messages), tuple(job.turns), job.error)
        result.regenerated = sum(1 for j in jobs.values() if not j.error)
    result.rows = [s for s in slots if s is not None]
    result.reused = len(used)
    _count(result, tokenizer, set(stop_ids), stop, used, jobs)
    return result


def _check(o: RegenerateOptions) -> None:
    if o.temperature < 0 or not 0 < o.top_p <= 1:
        raise UsageError("--temperature must be >= 0 and --top-p in (0, 1]")
    if o.max_new_tokens < 1 or o.batch_size < 1:
        raise UsageError("--max-new-tokens and the regenerate batch size must be at least 1")


def _settings(model: Path, tokenizer: Any, o: RegenerateOptions, stop_ids: list[int], stop: list[str],
              parser: ReplyParser) -> dict[str, Any]:
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else json.dumps(tokenizer.chat_template)
    form = parser.record()  # recorded only where replies are split: side files made before still serve others
    return {**({"reply_form": form} if form else {}),
        "model": str(model.absolute()), "template_sha256": hashlib.sha256((template or "").encode()).hexdigest(),
        "temperature": o.temperature, "top_p": o.top_p, "max_new_tokens": o.max_new_tokens,
        "seed": o.seed if o.temperature > 0 else None, "dtype": o.dtype, "stop_token_ids": stop_ids, "stop": stop,
    }


def _count(result: RegenerateResult, tokenizer: Any, stop_ids: set[int], stop: list[str],
           used: list[dict[str, Any]], jobs: dict[int, _Job]) -> None:
    for r in result.rows:
        for t in r.turns:
            result.turns += 1
            result.tokens += len(t.ids)
            result.truncated += t.finish == "length"
            result.retokenized_differs += _content(tokenizer, t, stop_ids, stop)[1]
        if r.row.is_chat and r.row.messages is None and not r.error:
            result.dropped_rows += 1
    result.dropped_turns = sum(int(e.get("dropped", 0)) for e in used) + sum(j.dropped for j in jobs.values())
    ran = {str(e.get("dtype")) for e in used if e.get("dtype")} | ({result.dtype} if result.dtype else set())
    result.dtype = ",".join(sorted(ran)) or None


def engine_options(o: RegenerateOptions) -> EngineOptions:
    return EngineOptions(dtype=o.dtype, tensor_parallel_size=o.tensor_parallel_size,
                         gpu_memory_utilization=o.gpu_memory_utilization, seed=o.seed)


def _max_model_len(model: Path, rt: RowTokenizer, jobs: list[_Job], o: RegenerateOptions) -> int:
    if o.max_model_len:
        return o.max_model_len
    limit = o.max_prompt_tokens
    if limit is None:  # the longest conversation as it is: its regenerated prompts are about as long
        limit = max(_rendered_len(rt, j.row) for j in jobs)
    return capped_model_len(model, limit + o.max_new_tokens)


def _rendered_len(rt: RowTokenizer, row: SourceRow) -> int:
    try:
        return len(rt.chat(row.messages or [], row.tools)[0])
    except ValueError:
        return 0  # reported when its prompt is rendered


def _run(model: Path, rt: RowTokenizer, parser: ReplyParser, jobs: list[_Job], side: SideFile, o: RegenerateOptions,
         stop_ids: list[int], stop: list[str], result: RegenerateResult, engine: LazyEngine | None) -> None:
    from vllm import SamplingParams

    from ..common.progress import bar

    own = engine is None
    if engine is None:
        engine = LazyEngine(model, engine_options(o), _max_model_len(model, rt, jobs, o))
    llm, max_len = engine.get(), engine.max_model_len
    result.dtype = engine.dtype
    limit = min(o.max_prompt_tokens or max_len, max_len - 1)
    stop_set = set(stop_ids)
    total = sum(len(_regenerable(j.messages or [], 0)) for j in jobs)
    logger.info("regenerating %d turns of %d rows (max_model_len %d, %s)", total, len(jobs), max_len, result.dtype)
    started, generated = time.monotonic(), 0
    try:
        with bar(total, "regenerate", "turn") as progress:
            for chunk in _chunks(jobs, o.batch_size):
                while True:
                    batch = []
                    for job in chunk:
                        at = job.pending()
                        if at is None:
                            continue
                        try:
                            ids = rt.chat(job.messages[:at], job.row.tools, add_generation_prompt=True)[0]
                        except ValueError as exc:
                            job.error = str(exc)
                            continue
                        if len(ids) >= limit:
                            job.cut(at)
                            progress.update(job.dropped)
                            continue
                        seed = (o.seed + int(job.key[:8], 16)) % 2**31 if o.temperature > 0 else None
                        params = SamplingParams(temperature=o.temperature, top_p=o.top_p, seed=seed,
                                                max_tokens=min(o.max_new_tokens, max_len - len(ids)),
                                                stop_token_ids=stop_ids, stop=stop or None,
                                                skip_special_tokens=False, detokenize=bool(stop))
                        batch.append((job, at, {"prompt_token_ids": ids}, params))
                    if not batch:
                        break
                    outs = llm.generate([b[2] for b in batch], [b[3] for b in batch], use_tqdm=False)
                    for (job, at, _, _), out in zip(batch, outs):
                        gen = out.outputs[0]
                        generated += len(gen.token_ids)
                        turn = Turn(at, list(gen.token_ids), "length" if gen.finish_reason == "length" else "stop")
                        job.accept(turn, reply_of(parser, turn, stop_set, stop))
                    progress.update(len(batch))
                    elapsed = max(time.monotonic() - started, 1e-9)
                    progress.set_postfix_str(f"{generated / elapsed:,.0f} tok/s", refresh=False)
                side.append([j.entry(result.dtype, o.max_prompt_tokens) for j in chunk if not j.error])
        result.seconds = time.monotonic() - started
    finally:
        del llm
        if own:
            engine.close()
