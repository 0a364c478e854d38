"""The files the pipeline reads and writes, and their validation.

* token rows (``prepare``'s output, ``extract``'s input): JSON lines
  ``{"input_ids": [int, ...], "loss_mask": [0|1, ...]}``.
* samples (``extract``'s output, speculators' offline format "v1"): ``OUT/data_{i}.pt`` for
  token line ``i`` (0-based) holding ``{"input_ids": LongTensor[T], "hidden_states":
  [Tensor[T, H] per layer id, in the order given], "loss_mask": LongTensor[T]}``.
* ``OUT/data_config.json``: what produced the samples.
* token frequencies (``prepare``'s side output, ``vocab``'s input): JSON
  ``{"counts": {"token_id": count}, "vocab_size": V, "counted": "assistant tokens"}``.
* ``prepare``'s other side outputs next to ``TOKENS.jsonl``: ``TOKENS.prepare.json`` (what made
  the file: inputs, template, options, counts), ``TOKENS.template.jinja`` (the chat template
  used), ``TOKENS.skipped.jsonl`` (``--skip-bad``), ``TOKENS.regenerated.jsonl`` (``--regenerate``),
  ``TOKENS.synthesized.jsonl`` (``--synthesize``).
* ``train``'s outputs next to the draft ``CKPT/0``: ``CKPT/loss.jsonl`` (a record per step),
  ``CKPT/train_config.json`` (what made the draft, its held-out files), ``CKPT/evals.jsonl``
  (held-out acceptance during training), ``CKPT/eval.json`` (the saved draft's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BadInput

SAMPLE_RE = re.compile(r"^data_(\d+)\.pt$")
DATA_CONFIG = "data_config.json"
LOSS_LOG = "loss.jsonl"
TRAIN_CONFIG = "train_config.json"


def sample_path(out: Path, index: int) -> Path:
    return Path(out) / f"data_{index}.pt"


def tokens_sibling(tokens: Path, suffix: str) -> Path:
    """``TOKENS{suffix}`` next to ``TOKENS.jsonl`` (e.g. ``.freq.json``, ``.prepare.json``)."""
    tokens = Path(tokens)
    return tokens.with_name(tokens.stem + suffix)


def freq_path_for(tokens: Path) -> Path:
    """Where ``prepare`` writes the token frequencies next to ``TOKENS.jsonl``."""
    return tokens_sibling(tokens, ".freq.json")


@dataclass(frozen=True)
class TokenRow:
    index: int  # 0-based line index in the file
    input_ids: list[int]
    loss_mask: list[int]


def _check_token_row(obj: Any, vocab_size: int | None) -> str | None:
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    ids, mask = obj.get("input_ids"), obj.get("loss_mask")
    if not isinstance(ids, list) or not ids:
        return "'input_ids' must be a non-empty list of integers"
    if not isinstance(mask, list):
        return "'loss_mask' must be a list of 0/1"
    if not all(type(t) is int and t >= 0 for t in ids):
        return "'input_ids' must hold non-negative integers"
    if vocab_size is not None and max(ids) >= vocab_size:
        return f"token id {max(ids)} is outside the vocabulary (size {vocab_size})"
    if len(mask) != len(ids):
        return f"'loss_mask' has {len(mask)} entries, 'input_ids' {len(ids)}"
    if not all(type(m) is int and m in (0, 1) for m in mask):
        return "'loss_mask' must hold 0 or 1"
    return None


def scan_checked_lines(path: Path, check: Callable[[Any], str | None],
                       blank_ok: bool = False) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """``(line number, object)`` for every JSON line of ``path`` that ``check`` accepts, and
    ``(line number, reason)`` for every other line (bad JSON, rejected rows); raises only when
    the file cannot be read."""
    out: list[tuple[int, Any]] = []
    problems: list[tuple[int, str]] = []
    try:
        fh = Path(path).open(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                if not blank_ok:
                    problems.append((lineno, "empty line"))
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append((lineno, f"not valid JSON ({exc.msg})"))
                continue
            why = check(obj)
            if why:
                problems.append((lineno, why))
                continue
            out.append((lineno, obj))
    return out, problems


def read_checked_lines(path: Path, check: Callable[[Any], str | None], what: str,
                       blank_ok: bool = False) -> list[tuple[int, Any]]:
    """``(line number, object)`` for every JSON line of ``path`` that ``check`` accepts; all
    problems (bad JSON, rejected rows) are reported at once with their line numbers (exit 3)."""
    out, problems = scan_checked_lines(path, check, blank_ok)
    if problems:
        raise BadInput(_summarize([f"{path}:{n}: {why}" for n, why in problems], f"malformed {what}"))
    if not out:
        raise BadInput(f"{path} holds no {what}")
    return out


def read_token_rows(path: Path, vocab_size: int | None = None) -> list[TokenRow]:
    """Read and check every row of a token file; all problems are reported at once (exit 3)."""
    rows = read_checked_lines(path, lambda obj: _check_token_row(obj, vocab_size), "token rows")
    return [TokenRow(lineno - 1, obj["input_ids"], obj["loss_mask"]) for lineno, obj in rows]


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun`` (a plural ending in s) agreeing: "1 bad row", "2 bad rows"."""
    return f"{n} {noun[:-1] if n == 1 and noun.endswith('s') else noun}"


def _summarize(problems: Sequence[str], what: str, limit: int = 20) -> str:
    shown = "\n  ".join(problems[:limit])
    more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
    return f"{counted(len(problems), what)}:\n  {shown}{more}"


# --- samples -------------------------------------------------------------------------------


def build_sample(input_ids: Sequence[int], loss_mask: Sequence[int], hidden_states: list) -> dict:
    import torch

    return {
        "input_ids": torch.as_tensor(list(input_ids), dtype=torch.long),
        "hidden_states": [h.contiguous() for h in hidden_states],
        "loss_mask": torch.as_tensor(list(loss_mask), dtype=torch.long),
    }


def sample_problems(
    sample: Any,
    *,
    num_layers: int,
    hidden_size: int,
    input_ids: Sequence[int] | None = None,
    check_finite: bool = True,
) -> list[str]:
    """Everything wrong with a sample (empty when valid).

    Checks the keys, dtypes, one ``[T, hidden_size]`` tensor per layer id, matching lengths,
    the token ids (when given) and, with ``check_finite``, that every state is finite.
    """
    import torch

    if not isinstance(sample, dict):
        return [f"not a dict but {type(sample).__name__}"]
    problems: list[str] = []
    ids, mask, states = sample.get("input_ids"), sample.get("loss_mask"), sample.get("hidden_states")
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 1:
        return ["'input_ids' is not a 1-D LongTensor"]
    t = ids.shape[0]
    if t == 0:
        problems.append("empty sequence")
    if input_ids is not None and (t != len(input_ids) or ids.tolist() != list(input_ids)):
        problems.append(f"'input_ids' ({t} tokens) differ from the token row ({len(input_ids)} tokens)")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.long or tuple(mask.shape) != (t,):
        problems.append(f"'loss_mask' is not a LongTensor[{t}]")
    if not isinstance(states, list) or len(states) != num_layers:
        n = len(states) if isinstance(states, list) else type(states).__name__
        problems.append(f"'hidden_states' must be a list of {num_layers} tensors, got {n}")
        return problems
    for k, h in enumerate(states):
        if not isinstance(h, torch.Tensor) or not h.is_floating_point():
            problems.append(f"hidden_states[{k}] is not a floating-point tensor")
        elif tuple(h.shape) != (t, hidden_size):
            problems.append(f"hidden_states[{k}] has shape {tuple(h.shape)}, expected ({t}, {hidden_size})")
        elif check_finite and not bool(torch.isfinite(h).all()):
            bad = (~torch.isfinite(h)).any(dim=-1).nonzero().flatten().tolist()
            problems.append(f"hidden_states[{k}] is not finite at {len(bad)} positions (first: {bad[:5]})")
    return problems


def load_sample(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def existing_sample_ok(path: Path, *, num_layers: int, hidden_size: int, input_ids: Sequence[int]) -> bool:
    """Cheap check of a sample written by an earlier run: it loads, and its structure, shapes
    and token ids match (the finite check is skipped: it was done before the file was written,
    and atomic writes mean a loadable file is a complete one)."""
    try:
        sample = load_sample(path)
    except Exception:  # noqa: BLE001 - any unreadable file is simply redone
        return False
    return not sample_problems(
        sample, num_layers=num_layers, hidden_size=hidden_size, input_ids=input_ids, check_finite=False
    )


def iter_sample_files(out: Path) -> Iterator[tuple[int, Path]]:
    for p in sorted(Path(out).iterdir()):
        m = SAMPLE_RE.match(p.name)
        if m:
            yield int(m.group(1)), p


# --- token frequencies -------------------------------------------------------------------


def write_freq(path: Path, counts: dict[int, int], vocab_size: int) -> None:
    from .atomic import write_json

    write_json(path, {
        "counted": "assistant tokens (loss_mask == 1)",
        "vocab_size": vocab_size,
        "counts": {str(k): int(v) for k, v in sorted(counts.items())},
    })


def read_freq(path: Path) -> tuple[dict[int, int], int | None]:
    """Token counts from our JSON or from speculators' ``token_freq.pt`` (a ``{id: count}`` dict)."""
    path = Path(path)
    try:
        if path.suffix == ".pt":
            import torch

            raw, vocab = torch.load(path, weights_only=True), None
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
            raw, vocab = data["counts"], data.get("vocab_size")
        counts = {int(k): int(v) for k, v in raw.items()}
    except FileNotFoundError:
        raise BadInput(f"token frequency file {path} does not exist") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"{path} is not a token frequency file: {exc}") from None
    if any(k < 0 or v < 0 for k, v in counts.items()):
        raise BadInput(f"{path} has negative token ids or counts")
    return counts, vocab
