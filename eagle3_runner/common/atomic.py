"""Atomic file writes: a temporary file in the destination's folder, fsync, ``os.replace``.

A reader (or a re-run after SIGKILL) sees either the old file, no file, or the complete new
file; never a torn one.  Leftover temporaries (``.*.tmp-*``) of a killed run are ignored by
readers and removed by :func:`clean_temporaries`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

TMP_MARK = ".tmp-"


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename in ``folder`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(dest: Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``dest``; on a clean exit fsync it and rename it to ``dest``."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}{TMP_MARK}", dir=dest.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(dest.parent)


def write_bytes(dest: Path, data: bytes) -> None:
    with atomic_open(dest, "wb") as fh:
        fh.write(data)


def write_text(dest: Path, text: str) -> None:
    with atomic_open(dest, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_json(dest: Path, obj: Any) -> None:
    write_text(dest, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_with(dest: Path, writer: Callable[[IO[bytes]], None]) -> None:
    """Atomically write ``dest`` with ``writer(fh)`` (e.g. ``lambda fh: torch.save(obj, fh)``)."""
    with atomic_open(dest, "wb") as fh:
        writer(fh)


def clean_temporaries(folder: Path) -> int:
    """Remove temporaries a killed writer left in ``folder``; returns how many."""
    n = 0
    if folder.is_dir():
        for p in folder.iterdir():
            if p.name.startswith(".") and TMP_MARK in p.name:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    n += 1
    return n
