"""Strip debug output (``print``, debug logging, breakpoints) that was hand-added to a file.

This is the pure core of ``vllm-compat strip-debug``: strings in, a :class:`StripResult` out;
no file I/O, no printing.

With ``expected`` (what the engine expects the file to hold: pristine upstream plus the
applicable patches) only what was *added* relative to ``expected`` is touched, matched by
position, never by text search.  The work is done on *units*: one unit is one logical line
(a statement line, however many physical lines it spans, found with :mod:`tokenize`) or one
blank/comment-only line.  Units compare as their exact text, so whatever survives keeps its
bytes.

1. The code units (no blank/comment lines) of ``expected`` and ``current`` are diffed
   (:class:`difflib.SequenceMatcher`); an ``if``/``for``/``while``/``with``/``try`` holding only
   debug output, and an ``else:``/``finally:`` clause holding only debug output, is one diff
   item, so its ``try:``/``else:`` lines are never matched with upstream ones.  Inside a
   changed hunk the units are re-matched one by one (the ``if x:`` line of a block whose body
   changed is not new).  A statement of ``current`` can only be removed when its unit is
   unmatched.  A changed upstream debug line (``log.info("a")`` edited into ``log.info("b")``)
   is recognised by similarity inside its hunk and kept as a leftover, not stripped.
2. On the statement tree (:mod:`ast`) of ``current``: every debug statement in such a unit is
   removed; a whole added compound statement holding only debug output (and ``pass``) is
   removed whole, and so is an added ``else:``/``elif``/``finally:`` clause; imports that were
   added and are used by nothing but removed statements go too (``import logging`` for
   ``logging.info``, ``import sys`` for ``print(..., file=sys.stderr)``, ``import pdb``).
   Several statements on one line (``x = 1; print(x)``) are edited inside the line.  A block
   left empty gets ``pass`` (at the removed statement's indentation).
3. Blank lines and comments: code lines that match (or are 1:1 edits) anchor the alignment;
   between two anchors where something was removed, the blank/comment lines are made those of
   ``expected`` when dropping lines can do it (a dropped comment must touch a removed
   statement: ``# DEBUG`` above a print); otherwise only added runs touching a removed
   statement go, never more copies of a line than the gap has beyond upstream's.
4. A last diff reports every other difference as a :class:`Leftover`; those are never touched.

When the only differences are added debug statements, the result is byte-identical to
``expected``.  Without ``expected`` (a user's own script) every bare ``print(...)`` (including
``print(..., file=sys.stderr)``), ``breakpoint()``, ``pdb.set_trace()`` and then-unused
``import pdb`` is removed; logging never is (nothing tells debug logging from real logging).

Either way a print whose value is used (``x = print(...)``, ``f(print(x))``) is never touched:
only a call that is a whole expression statement counts.  Arguments are not inspected, so
``print(it.pop())`` is removed with its side effect.

Recognised debug output (bare expression statements only): ``print(...)``; ``breakpoint()``;
``pdb``/``ipdb``/``pudb`` ``.set_trace()``/``.post_mortem()``, ``__import__("pdb").set_trace()``
and a bare ``set_trace()``; with ``expected`` also ``<receiver>.debug/info/warning/warn/error/
exception/critical(...)`` where the receiver's last name is ``logger``, ``log``, ``LOGGER``,
``_logger``, ``_log`` or ``logging``.  Not recognised: ``logging.getLogger(...).info(...)``,
an aliased ``from pdb import set_trace as st; st()``, ``pprint``, ``sys.stderr.write``.

Limitations: removing a print also drops side effects in its arguments; an added debug line
that is a near copy of an upstream debug line *changed in the same hunk* is kept (taken for
an edit); with several edits and insertions crowded together, blank-line attribution may leave
an added blank line (it is then reported as a leftover, never silently lost).  The statement
tree comes from :mod:`ast` of the running Python (the interpreter whose site-packages are
stripped; libcst is not needed).  Lines are split on ``\\n`` only (``\\r\\n`` files keep their
bytes; pass the text read with ``newline=""``; a lone ``\\r`` line ending is not supported).

Where each part lives: :mod:`.source` (lines, logical-line units, statement tree),
:mod:`.debug` (what counts as debug output), :mod:`.diff` (steps 1 and 4: which units were
added, what else differs), :mod:`.statements` (step 2), :mod:`.trivia` (step 3),
:mod:`.results` (what a strip returns).
"""

from __future__ import annotations

import ast

from .diff import _Diff
from .results import Leftover, Removed, StripError, StripResult
from .source import _Source
from .statements import _StatementRemoval
from .trivia import _TriviaCleanup

__all__ = [
    "Leftover",
    "Removed",
    "StripError",
    "StripResult",
    "strip_debug",
]


class _Stripper(_Diff, _StatementRemoval, _TriviaCleanup):
    def __init__(self, current: str, expected: str | None):
        self.cur = _Source(current, "current")
        self.exp = _Source(expected, "expected") if expected is not None else None
        self.logging = self.exp is not None
        self.eligible = self._eligible_units()
        self.removed: dict[int, tuple[ast.stmt, str]] = {}  # id(stmt) -> (stmt, kind)
        self.texts: dict[int, str] = {}  # unit index -> new text ("" deletes the unit)
        # else/finally/elif clauses dropped whole: id(body) -> unit of the else:/finally: line
        self.dropped: dict[int, int | None] = {}

    def result(self) -> StripResult:
        self.choose()
        if not self.removed:
            return StripResult(self.cur.text, (), self.leftovers())
        self.apply()
        self.trivia()
        source = "".join(self._text(u) for u in range(len(self.cur.units)))
        try:
            ast.parse(source)
        except SyntaxError as exc:  # pragma: no cover - a bug in this module
            raise StripError(f"stripping produced invalid Python at line {exc.lineno}: "
                             f"{exc.msg} (please report this)", exc.lineno or 0) from exc
        removed = sorted(self.removed.values(), key=lambda sk: (sk[0].lineno, sk[0].col_offset))
        return StripResult(
            source,
            tuple(Removed(s.lineno, self.cur.segment(s), k) for s, k in removed),
            self.leftovers(),
        )


def strip_debug(current: str, expected: str | None) -> StripResult:
    """Remove hand-added debug output from ``current``.

    ``expected`` is the content the file should have (pristine upstream plus the applicable
    patches): only debug statements added relative to it are removed, everything else that
    differs is reported as a :class:`Leftover`.  With ``expected=None`` (a user's own script)
    bare ``print(...)`` (also ``print(..., file=sys.stderr)``), ``breakpoint()``,
    ``pdb.set_trace()`` and ``import pdb`` statements are removed, logging calls never.

    Raises :class:`StripError` (a ``ValueError``) when either source does not parse.
    """
    return _Stripper(current, expected).result()
