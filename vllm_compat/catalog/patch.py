"""The patch declaration: what a catalog module in ``patches/`` states about one upstream break.

Everything here is plain data so that loading the catalog (which ``status`` and ``verify`` do)
never imports libcst.  The edits are carried out by :mod:`vllm_compat.transform`, which does.

A patch module creates one :class:`Patch` and passes it to :func:`register`; the catalog imports
every module under ``patches/`` and collects what registered (the django-upgrade way).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "AddKeyword",
    "Edit",
    "InsertAfter",
    "Patch",
    "Probe",
    "ReplaceDef",
    "ReplaceExpr",
    "ReplaceStmt",
    "RemoveKeyword",
    "Shim",
    "forget",
    "register",
    "registered",
    "todo_fields",
]


@dataclass(frozen=True)
class Edit:
    """One structural edit of one file.

    ``scope`` is the dotted qualified name of the function or class whose body is searched
    (``"VllmHiddenStatesGenerator.__init__"``), or ``""`` for the whole module.  Code is
    matched by its AST, so formatting and comments in the target do not matter.
    """

    file: str
    scope: str

    @property
    def anchor(self) -> str:
        """The code this edit consumes; two unordered patches consuming one anchor conflict."""
        raise NotImplementedError


@dataclass(frozen=True)
class ReplaceStmt(Edit):
    """Replace the statement(s) equal to ``old`` by ``new``; a no-op where ``new`` is present.

    ``old`` may be several consecutive statements (matched as a run) or one compound
    statement (matched with its whole body).  ``count`` is how many runs must match
    (``0``: every run, at least one).
    """

    old: str = ""
    new: str = ""
    count: int = 1

    @property
    def anchor(self) -> str:
        return self.old


@dataclass(frozen=True)
class ReplaceExpr(Edit):
    """Replace every expression equal to ``old`` by ``new`` inside ``scope``.

    A no-op where ``old`` no longer occurs and ``new`` does (so ``t(t(x)) == t(x)`` even when
    ``new`` contains ``old``, e.g. wrapping a call).
    """

    old: str = ""
    new: str = ""

    @property
    def anchor(self) -> str:
        return self.old


@dataclass(frozen=True)
class InsertAfter(Edit):
    """Insert the statements ``new`` right after the statement equal to ``after``.

    ``after=""`` inserts after the imports at the top of ``scope`` (module scope) or after
    the docstring (function scope).  A no-op where ``new``'s first statement already follows
    the anchor (so a later patch may rewrite the rest of the insertion).
    """

    after: str = ""
    new: str = ""

    @property
    def anchor(self) -> str:
        return f"<after>{self.after}"


@dataclass(frozen=True)
class ReplaceDef(Edit):
    """Replace the whole function or class named by ``scope`` with ``new`` (or add it at
    module end when it does not exist and ``create`` is set)."""

    new: str = ""
    create: bool = False

    @property
    def anchor(self) -> str:
        return f"<def>{self.scope}"


@dataclass(frozen=True)
class AddKeyword(Edit):
    """Add ``keyword=value`` to every call of ``call`` (the callee as written, e.g.
    ``"Scheduler"``) in ``scope``; a no-op where the call already passes ``keyword``."""

    call: str = ""
    keyword: str = ""
    value: str = ""

    @property
    def anchor(self) -> str:
        return f"<call>{self.call}({self.keyword}=)"


@dataclass(frozen=True)
class RemoveKeyword(Edit):
    """Drop ``keyword=...`` from every call of ``call`` in ``scope``."""

    call: str = ""
    keyword: str = ""

    @property
    def anchor(self) -> str:
        return f"<call>{self.call}({self.keyword}=)"


@dataclass(frozen=True)
class Probe:
    """A static check of a dependency's installed *source*: nightlies lie about versions.

    True when ``pattern`` (a regular expression) is found (``present=True``) or not found
    (``present=False``) in ``file`` (relative to site-packages) of distribution ``dist``.
    A missing file counts as "not found".
    """

    dist: str
    file: str
    pattern: str
    present: bool = True


@dataclass(frozen=True)
class Shim:
    """A module vendored into the patched package, managed like any patched file.

    ``source`` is a file name under ``patches/shims/``; ``dest`` is the path relative to
    site-packages (``"speculators/_vllm_compat_kv.py"``).
    """

    source: str
    dest: str


@dataclass(frozen=True)
class Patch:
    """One upstream break and its fix, valid for a declared range of versions."""

    id: str
    title: str
    target: str  # distribution that owns the patched files, e.g. "speculators"
    target_versions: str  # PEP 440 specifier set, e.g. ">=0.3,<0.5"
    why: str
    upstream: str  # the upstream change this answers (release, file, commit)
    remove_when: str
    requires: dict[str, str] = field(default_factory=dict)  # {"vllm": ">=0.11.1"}
    probes: tuple[Probe, ...] = ()
    edits: tuple[Edit, ...] = ()
    shims: tuple[Shim, ...] = ()
    after: tuple[str, ...] = ()  # ids of patches that must be applied before this one
    obsolete_if: tuple[Probe, ...] = ()  # all true => upstream already has the change
    module: str = ""  # set by register(): the catalog module that declared it

    @property
    def files(self) -> tuple[str, ...]:
        """Every site-packages-relative path this patch writes (edited files, then shims)."""
        seen: dict[str, None] = {}
        for e in self.edits:
            seen.setdefault(e.file, None)
        for s in self.shims:
            seen.setdefault(s.dest, None)
        return tuple(seen)


_REGISTRY: list[Patch] = []


def register(patch: Patch, module: str) -> Patch:
    """Record ``patch`` in the catalog; catalog modules call ``register(Patch(...), __name__)``
    at import time.  Registering again from the same module (a reload) replaces its patch."""
    patch = Patch(**{**patch.__dict__, "module": module})
    _REGISTRY[:] = [p for p in _REGISTRY if (p.module, p.id) != (module, patch.id)]
    _REGISTRY.append(patch)
    return patch


def registered() -> list[Patch]:
    return list(_REGISTRY)


def forget(package: str) -> None:
    """Drop what the modules of ``package`` registered (a user catalog about to be re-read)."""
    _REGISTRY[:] = [p for p in _REGISTRY if p.module != package and not p.module.startswith(package + ".")]


def todo_fields(patch: Patch) -> list[str]:
    """The documentation fields of ``patch`` still reading "TODO" (as `record` leaves them)."""
    return [f for f in ("title", "why", "upstream", "remove_when") if getattr(patch, f).strip().startswith("TODO")]
