"""What stripping returns: the new source, what was removed, what was left alone."""

from __future__ import annotations

from dataclasses import dataclass


class StripError(ValueError):
    """A source that cannot be parsed (``line`` is 1-based; 0 when unknown)."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Removed:
    """One removed statement."""

    line: int  # 1-based line in the input (current) source
    code: str  # the removed statement's source, stripped
    kind: str  # "print" | "logging" | "breakpoint" | "pdb" (also ``import pdb``) | "import"


@dataclass(frozen=True)
class Leftover:
    """A hand edit that is not debug output: reported, never touched."""

    line: int  # 1-based line in the input (current) source; 0 for a deletion
    summary: str  # "changed: x = 1 -> x = 2", "added: foo()", "removed: bar()"


@dataclass(frozen=True)
class StripResult:
    source: str  # the new source (== input when nothing was removed)
    removed: tuple[Removed, ...]
    leftovers: tuple[Leftover, ...]

    @property
    def changed(self) -> bool:
        return bool(self.removed)
