"""The side file of ``regenerate``: JSON lines, one header then one entry per finished row.

``{"eagle3_regenerate": 1, "settings": {...}}`` first, then ``{"key", "messages", "turns"}`` per
row.  Entries are appended a batch at a time with one ``write`` and an ``fsync``, so a killed run
loses at most the batch in flight; a torn last line (killed inside the write) is cut off when
the file is opened again.  A file made with other settings is refused, not mixed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ..common.atomic import fsync_dir, write_text
from ..common.errors import BadInput, UsageError

logger = logging.getLogger(__name__)

VERSION = 1


class SideFile:
    def __init__(self, path: Path, settings: dict[str, Any]) -> None:
        self.path = Path(path)
        self.settings = settings

    def load(self) -> dict[str, dict[str, Any]]:
        """Entries by key; creates the file (header only) when it does not exist."""
        if not self.path.exists():
            write_text(self.path, json.dumps({"eagle3_regenerate": VERSION, "settings": self.settings}) + "\n")
            return {}
        self._cut_torn_tail()
        entries: dict[str, dict[str, Any]] = {}
        with self.path.open(encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        if not lines:
            raise BadInput(f"{self.path} is empty: not a regenerate side file (remove it to start afresh)")
        self._check_header(lines[0])
        for n, line in enumerate(lines[1:], start=2):
            try:
                entry = json.loads(line)
                entries[entry["key"]] = entry
            except (ValueError, KeyError, TypeError):
                logger.warning("%s:%d: unreadable entry ignored (its row is regenerated again)", self.path, n)
        return entries

    def _check_header(self, line: str) -> None:
        try:
            head = json.loads(line)
            have = head["settings"]
            ok = head.get("eagle3_regenerate") == VERSION and isinstance(have, dict)
        except (ValueError, KeyError, TypeError):
            ok, have = False, {}
        if not ok:
            raise BadInput(f"{self.path} is not a regenerate side file (its first line is no header)")
        diff = {k: (have.get(k), v) for k, v in self.settings.items() if have.get(k) != v}
        if diff:
            detail = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in sorted(diff.items()))
            raise UsageError(f"{self.path} holds responses made with other settings ({detail})",
                             hint="remove it to regenerate everything, or write to another output")

    def _cut_torn_tail(self) -> None:
        with self.path.open("rb+") as fh:
            data = fh.read()
            end = data.rfind(b"\n") + 1
            if end < len(data):
                logger.warning("%s: cutting a torn last line (%d bytes) left by a killed run", self.path, len(data) - end)
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())

    def append(self, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        blob = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(self.path.parent)
