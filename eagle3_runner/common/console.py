"""The terminal of a long command: quiet by default, each step's output in its own log file.

vLLM's engine logs, library warnings and the children's output are written to file
descriptors 1 and 2 by code we do not own (and by child processes, which inherit them), so a
quiet step moves those descriptors to ``WORK/logs/STEP.log`` for its duration.  What the user
should see (the step headers, progress bars, milestones, warnings and errors of this package)
goes to a copy of the terminal taken before the move: :func:`terminal`.  ``eagle3 -v`` leaves
every descriptor where it is (:func:`quiet_terminal` is not entered) and everything shows.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

MILESTONE = "milestone"  # ``logger.info(..., extra={MILESTONE: True})``: shown on a quiet terminal too

_state: dict[str, Any] = {"terminal": None, "log": None}


def terminal() -> TextIO:
    """Where progress bars and milestones go: the real terminal, even while a step's output is
    in its log file."""
    return _state["terminal"] or sys.stderr


def quiet() -> bool:
    return _state["terminal"] is not None


def step_log() -> Path | None:
    """The log file of the step running now on a quiet terminal (None otherwise)."""
    return _state["log"]


def milestone(log: logging.Logger, msg: str, *args: Any) -> None:
    """An INFO line the quiet terminal shows too (the rest of INFO goes to the step's log)."""
    log.info(msg, *args, extra={MILESTONE: True})


def _shown(record: logging.LogRecord) -> bool:
    """What the quiet terminal shows: milestones, and this package's warnings and errors."""
    if getattr(record, MILESTONE, False):
        return True
    return record.levelno >= logging.WARNING and record.name.startswith("eagle3_runner")


def _between_steps(record: logging.LogRecord) -> bool:
    """The root handler (descriptor 2): everything inside a step goes to its log; between steps,
    only other libraries' warnings (this package's reach the terminal through its own handler)."""
    if _state["log"] is not None:
        return True
    return record.levelno >= logging.WARNING and not record.name.startswith("eagle3_runner")


@contextmanager
def quiet_terminal() -> Iterator[None]:
    """While the block runs, this package's milestones, warnings and errors reach the terminal
    through a copy of file descriptor 2, whatever :func:`step_output` does with descriptors 1
    and 2; afterwards every handler, filter and descriptor is as it was (the CLI runs in
    process in tests, and a later command must not find a quiet terminal it did not ask for)."""
    if _state["terminal"] is not None:
        yield
        return
    sys.stderr.flush()
    _state["terminal"] = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    handler = logging.StreamHandler(_state["terminal"])
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(_shown)
    ours = logging.getLogger("eagle3_runner")
    ours.addHandler(handler)
    others = list(logging.getLogger().handlers)
    for other in others:
        other.addFilter(_between_steps)
    try:
        yield
    finally:
        for other in others:
            other.removeFilter(_between_steps)
        ours.removeHandler(handler)
        _state["terminal"].close()
        _state["terminal"] = None


@contextmanager
def step_output(log_path: Path) -> Iterator[Path | None]:
    """On a quiet terminal: descriptors 1 and 2 (and so every child's output) append to
    ``log_path`` while the block runs; yields the path.  Otherwise yields None and changes nothing."""
    if not quiet() or _state["log"] is not None:  # not quiet, or already inside a step's log
        yield None
        return
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        _state["log"] = log_path
        try:
            yield log_path
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            _state["log"] = None
