"""``eagle3 prepare``: chat or text rows -> token rows with a loss mask on what the draft learns.

Input (:mod:`eagle3_runner.prepare.readers`): JSON lines, Parquet or a ``datasets`` folder, in OpenAI
``messages``, ShareGPT ``conversations`` or plain ``text`` rows, detected per file (``--format``
forces one).  Chat rows are rendered with the chat template (:mod:`eagle3_runner.prepare.chat_templates`:
the tokenizer's own, ``--chat-template FILE`` or a built-in name) and masked on the assistant turns
(:mod:`eagle3_runner.prepare.chat_tokens`); text rows are in the loss on every token.

``--regenerate`` first replaces the assistant turns by the verifier's own responses
(:mod:`eagle3_runner.prepare.regenerate`, side file ``TOKENS.regenerated.jsonl``); such a row is written
as the exact prompt the verifier saw for its last turn, then the ids it generated.

Rows are truncated to ``--seq-length`` tokens.  Output rows are ``{"input_ids", "loss_mask"}``;
next to ``TOKENS.jsonl``: ``TOKENS.freq.json`` (frequencies of the masked-in tokens, for
``eagle3 vocab``), ``TOKENS.template.jinja`` (the chat template used) and ``TOKENS.prepare.json``
(inputs, template name/source/sha256, options, counts).  Bad rows (bad JSON, unknown roles,
empty turns, a conversation that does not end with an assistant turn, a template that refuses
it) stop the step (exit 3) with every offending line and reason, and nothing is written;
``--skip-bad`` skips them and lists them in ``TOKENS.skipped.jsonl`` (``{"file", "line", "reason"}``).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..common.atomic import atomic_open, write_json, write_text
from .chat_templates import TemplateInfo, load_tokenizer, no_template_error
from .chat_tokens import RowTokenizer, mask_by_prefix_diff, mask_with_generation_tags  # noqa: F401 - re-exported
from .engine import LazyEngine, capped_model_len
from ..common.errors import BadInput, UsageError
from ..common.environment import load_model_config, versions
from ..common.formats import counted, freq_path_for, tokens_sibling, write_freq
from .readers import BadRow, InputInfo, ReadResult, SourceRow, bad_rows_error, read_rows
from .regenerate import RegenerateOptions, RegenerateResult, engine_options, regenerate as regenerate_rows
from .synthesize import SynthesizeOptions, SynthesizeResult, synthesize as synthesize_turns

logger = logging.getLogger(__name__)

RECORD, TEMPLATE, SKIPPED, REGENERATED = ".prepare.json", ".template.jinja", ".skipped.jsonl", ".regenerated.jsonl"
SYNTHESIZED = ".synthesized.jsonl"
SYNTHESIZED_SOURCE = "synthesized"  # the source name of synthesized rows (their line: the turn's index + 1)


@dataclass(frozen=True)
class PrepareResult:
    output: Path
    freq: Path
    rows: int
    tokens: int
    masked_tokens: int
    truncated: int
    mask_method: str  # "generation-tags", "prefix-diff" or "text" (text rows only)
    skipped: int = 0
    skipped_report: Path | None = None
    record: Path | None = None
    template: TemplateInfo | None = None
    inputs: tuple[InputInfo, ...] = ()
    regenerate: RegenerateResult | None = None
    synthesize: SynthesizeResult | None = None


def request(model: Path, data: Path | Sequence[Path], seq_length: int, chat_template: str | None, format: str,
            skip_bad: bool, regenerate: RegenerateOptions | None,
            synthesize: SynthesizeOptions | None = None) -> dict[str, Any]:
    """What a prepare run is asked to do (recorded; ``eagle3 run`` redoes prepare when it changes)."""
    paths = [data] if isinstance(data, (str, Path)) else list(data or ())
    inputs = []
    for p in paths:
        st = Path(p).stat() if Path(p).exists() else None
        inputs.append({"path": str(Path(p).absolute()), "size": st.st_size if st else None,
                       "mtime_ns": st.st_mtime_ns if st else None})
    return {"model": str(Path(model).absolute()), "data": inputs, "seq_length": seq_length,
            "chat_template": chat_template, "format": format, "skip_bad": skip_bad,
            "regenerate": asdict(regenerate) if regenerate else None,
            **({"synthesize": asdict(synthesize)} if synthesize else {})}


def prepare_is_complete(output: Path, wanted: dict[str, Any]) -> bool:
    """The token file, its frequencies and its record exist, and the record asked for ``wanted``."""
    rec = tokens_sibling(output, RECORD)
    if not (Path(output).is_file() and freq_path_for(output).is_file() and rec.is_file()):
        return False
    try:
        return json.loads(rec.read_text(encoding="utf-8")).get("request") == json.loads(json.dumps(wanted))
    except (OSError, ValueError):
        return False


def prepare(model: Path, data: Path | Sequence[Path] | None, output: Path, seq_length: int = 2048, *,
            chat_template: str | None = None, format: str = "auto", skip_bad: bool = False,
            regenerate: RegenerateOptions | None = None, synthesize: SynthesizeOptions | None = None) -> PrepareResult:
    if seq_length < 2:
        raise BadInput(f"--seq-length must be at least 2, got {seq_length}")
    if not data and not synthesize:
        raise UsageError("prepare needs --data, --synthesize N, or both")
    if synthesize and not regenerate:  # synthesized user turns have no answer yet
        regenerate = RegenerateOptions()
    asked = request(model, data, seq_length, chat_template, format, skip_bad, regenerate, synthesize)
    read = read_rows(data, format, open_ended=regenerate is not None) if data else ReadResult()
    bad: list[BadRow] = list(read.bad)
    if bad and not skip_bad:
        raise bad_rows_error(bad)
    if not read.rows and not synthesize:
        raise BadInput(f"{', '.join(i.path for i in read.inputs)} holds no usable rows ({len(bad)} bad)")
    tokenizer, info = load_tokenizer(model, chat_template)
    if info is None and synthesize:
        raise no_template_error(model, "--synthesize writes chat turns: it needs a template that says where a "
                                       "user's message starts")
    if info is None and any(r.is_chat for r in read.rows):
        raise no_template_error(model)
    vocab_size = int(getattr(load_model_config(model), "vocab_size", None) or len(tokenizer))
    rt = RowTokenizer(tokenizer)
    output = Path(output)

    engine = None
    rows = list(read.rows)
    synth = None
    if regenerate:
        engine = LazyEngine(model, engine_options(regenerate), capped_model_len(model, seq_length + regenerate.max_new_tokens))
    if synthesize:
        synth = synthesize_turns(model, tokenizer, tokens_sibling(output, SYNTHESIZED), synthesize, engine)
        rows += [SourceRow(SYNTHESIZED_SOURCE, i + 1, [{"role": "user", "content": q}, {"role": "assistant", "content": ""}])
                 for i, q in enumerate(synth.prompts)]
    has_chat = any(r.is_chat for r in rows)
    regen = None
    items: list[tuple[SourceRow, list[int] | None, str | None]] = [(r, None, None) for r in rows]
    if regenerate and has_chat:
        opts = replace(regenerate, max_prompt_tokens=regenerate.max_prompt_tokens or seq_length)
        try:
            regen = regenerate_rows(model, rows, tokens_sibling(output, REGENERATED), opts, tokenizer, engine)
        finally:
            engine.close()
        items = [(r.row, r.reply, r.error) for r in regen.rows if r.row.messages is not None or not r.row.is_chat]
        if regen.dropped_rows:
            logger.warning("%d rows dropped: their first prompt alone fills --seq-length %d", regen.dropped_rows, seq_length)
    method = rt.method if has_chat else "text"
    logger.info("tokenizing %d rows (assistant mask by %s)", len(items), method)

    freq: Counter[int] = Counter()
    n_rows = n_tokens = n_masked = n_truncated = n_unmasked = 0
    with atomic_open(output, "w", encoding="utf-8") as fh:
        for row, reply, error in _progress(items):
            try:
                if error:
                    raise ValueError(error)
                ids, mask = _tokens(rt, row, reply)
            except ValueError as exc:
                bad.append(BadRow(row.source, row.line, str(exc)))
                continue
            if len(ids) > seq_length:
                ids, mask = ids[:seq_length], mask[:seq_length]
                n_truncated += 1
            masked = [t for t, m in zip(ids, mask) if m]
            n_unmasked += not masked
            freq.update(masked)
            n_rows, n_tokens, n_masked = n_rows + 1, n_tokens + len(ids), n_masked + len(masked)
            fh.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
        if bad and not skip_bad:
            raise bad_rows_error(bad)  # inside atomic_open: nothing is written
        if not n_rows:
            raise BadInput(f"no usable rows in {', '.join(i.path for i in read.inputs)} ({len(bad)} bad)")

    freq_file = freq_path_for(output)
    write_freq(freq_file, dict(freq), vocab_size)
    template_file = _side_output(output, TEMPLATE, info.text if info else None)
    report = _side_output(output, SKIPPED, "".join(json.dumps(b.record()) + "\n" for b in bad) if skip_bad else None)
    if n_unmasked:
        logger.warning("%d rows have no token in the loss (after truncation); they add no loss", n_unmasked)
    if bad:
        logger.warning("%s skipped, listed in %s", counted(len(bad), "bad rows"), report)
    counts = {"rows": n_rows, "tokens": n_tokens, "masked_tokens": n_masked, "truncated": n_truncated,
              "skipped": len(bad), "no_loss_rows": n_unmasked}
    record = tokens_sibling(output, RECORD)
    write_json(record, {
        "request": asked,
        "inputs": [asdict(i) for i in read.inputs],
        "chat_template": {**info.record(), "file": str(template_file)} if info else None,
        "mask_method": method,
        "skipped_report": str(report) if report else None,
        "regenerate": regen.record() if regen else None,
        "synthesize": synth.record() if synth else None,
        "counts": counts,
        "vocab_size": vocab_size,
        "versions": versions(),
    })
    return PrepareResult(output, freq_file, n_rows, n_tokens, n_masked, n_truncated, method, len(bad), report,
                         record, info, tuple(read.inputs), regen, synth)


def _tokens(rt: RowTokenizer, row: SourceRow, reply: list[int] | None) -> tuple[list[int], list[int]]:
    if not row.is_chat:
        return rt.text(row.text or "")
    assert row.messages is not None
    if reply is not None:  # regenerated: the verifier's prompt, then its ids verbatim
        return rt.prompt_and_reply(row.messages[:-1], row.tools, reply)
    return rt.conversation(row.messages, row.tools)


def _side_output(output: Path, suffix: str, text: str | None) -> Path | None:
    """Write ``TOKENS{suffix}``, or remove a stale one from an earlier run when there is nothing to write."""
    path = tokens_sibling(output, suffix)
    if text is None:
        if path.exists():
            os.unlink(path)
        return None
    write_text(path, text)
    return path


def _progress(items: list) -> Any:
    from ..common.progress import bar

    return bar(len(items), "prepare", "row", iterable=items, leave=False)
