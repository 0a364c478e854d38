"""What the commands return and the exit codes they map to (shared by :mod:`.api`,
:mod:`.plan` and :mod:`.record`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from .state import DRIFTED, PENDING, STALE, FileState, PatchState

__all__ = ["CommandError", "Exit", "RecordResult", "Report"]


class Exit(IntEnum):
    """Process exit codes (also listed in the README and ``--help``)."""

    OK = 0
    USAGE = 2  # bad command line
    ENV = 3  # target missing, unreadable, not writable, corrupt state
    TARGET = 4  # a target file does not parse, or a patch's anchor is missing
    PENDING = 10  # applicable patches not applied (or the catalog changed)
    DRIFTED = 11  # managed files were edited by hand (revert refuses without --force)
    STALE = 12  # a patched distribution or a dependency was reinstalled/upgraded since apply
    UNSUPPORTED = 13  # installed version no patch covers and not known-good
    CHECK = 14  # `check` found calls that do not bind to the installed vLLM
    CATALOG = 15  # the catalogs are inconsistent (colliding ids, contradictions, paths out of the target)
    CATALOG_LOAD = 16  # a catalog cannot be loaded (missing folder, a module fails to import, bad entry point)
    RECORD = 17  # record cannot turn the hand edits into a patch that reproduces them
    NETWORK = 18  # check --against: a release's wheel cannot be fetched (no network, index unreachable)
    UNKNOWN_RELEASE = 19  # check --against: the index has no such release
    PROOF = 20  # prove: the patched stack's hidden states differ from HF transformers (or nothing could run)
    ADVISORY = 21  # an advisory of the catalogs matches the installed versions (--allow-advisory ID accepts it)


class CommandError(Exception):
    """A command could not run; ``code`` is the exit code it maps to."""

    def __init__(self, message: str, code: Exit) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Report:
    site: str
    versions: dict[str, str]  # package -> installed version
    patches: tuple[PatchState, ...]
    files: tuple[FileState, ...]
    unsupported: tuple[str, ...] = ()
    fast: bool = False  # answered from the manifest alone
    notes: tuple[str, ...] = ()  # facts worth a line that change no exit code
    advisories: tuple = ()  # vllm_compat.catalog.decide.AdvisoryMatch, those whose versions match

    @property
    def code(self) -> Exit:
        states = {f.state for f in self.files} | {p.state for p in self.patches}
        if self.unsupported:
            return Exit.UNSUPPORTED
        for state, code in ((DRIFTED, Exit.DRIFTED), (STALE, Exit.STALE), (PENDING, Exit.PENDING)):
            if state in states:
                return code
        if any(not a.allowed for a in self.advisories):
            return Exit.ADVISORY
        return Exit.OK

    def allowing(self, ids: tuple[str, ...] | list[str]) -> "Report":
        """This report with the advisories ``ids`` accepted (``--allow-advisory``)."""
        return replace(self, advisories=tuple(replace(a, allowed=a.allowed or a.advisory.id in ids)
                                              for a in self.advisories))

    def to_dict(self) -> dict:
        return {
            "site": self.site, "versions": self.versions, "exit_code": int(self.code),
            "result": self.code.name.lower(), "unsupported": list(self.unsupported), "notes": list(self.notes),
            "advisories": [a.to_dict() for a in self.advisories],
            "patches": [vars(p) | {"files": list(p.files)} for p in self.patches],
            "files": [vars(f) | {"patches": list(f.patches)} for f in self.files],
        }


@dataclass(frozen=True)
class RecordResult:
    module: str  # the patch module written
    patches: tuple[str, ...]  # ids as loaded (NAME:ID)
    files: dict[str, tuple[str, ...]]  # edited file -> the kinds of its edits, in order
    differences: dict[str, str]  # file -> what the patch does not reproduce (same AST; empty: byte-exact)
    in_use: bool  # whether the catalog is found without --catalog (pyproject.toml, entry point)
    notes: tuple[str, ...] = ()
    written: tuple[str, ...] = ()  # files the commit wrote (pending patches elsewhere, stated differences)
