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
"""

from __future__ import annotations

import ast
import difflib
import io
import textwrap
import tokenize
from collections import Counter
from dataclasses import dataclass

__all__ = [
    "Leftover",
    "Removed",
    "StripError",
    "StripResult",
    "strip_debug",
]

LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical"})
LOG_RECEIVERS = frozenset({"logger", "log", "LOGGER", "_logger", "_log", "logging"})
PDB_MODULES = frozenset({"pdb", "ipdb", "pudb"})
PDB_CALLS = frozenset({"set_trace", "post_mortem"})
# Compound statements removed whole when they were added and hold only debug output.
_WHOLE = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ()
)
# A changed debug line whose text is at least this similar to an upstream debug line in the
# same changed hunk is taken for an edit of that line (kept), not for an addition.
_EDIT_SIMILARITY = 0.6


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


# ---------------------------------------------------------------------------------------------
# Parsing


def _split_lines(text: str) -> list[str]:
    """Physical lines with their endings, split on ``\\n`` only (as tokenize and ast do)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


@dataclass
class _Unit:
    first: int  # 1-based first physical line
    last: int  # 1-based last physical line
    text: str
    trivia: bool  # blank or comment-only line


class _Source:
    """A parsed source: lines, logical-line units, statement tree."""

    def __init__(self, text: str, what: str):
        self.text = text
        try:
            self.tree = ast.parse(text)
        except SyntaxError as exc:
            line = exc.lineno or 0
            raise StripError(f"{what} source has a syntax error at line {line}: {exc.msg}",
                             line) from exc
        except ValueError as exc:  # null bytes (Python < 3.12)
            line = text.count("\n", 0, max(text.find("\0"), 0)) + 1
            raise StripError(f"{what} source cannot be parsed at line {line}: {exc}",
                             line) from exc
        self.lines = _split_lines(text)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.units = self._units(what)
        self.unit_of_line = [0] * (len(self.lines) + 2)
        for i, u in enumerate(self.units):
            for ln in range(u.first, u.last + 1):
                self.unit_of_line[ln] = i
        # statements starting in each unit
        self.unit_stmts: list[list[ast.stmt]] = [[] for _ in self.units]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.stmt):
                self.unit_stmts[self.unit_of_line[node.lineno]].append(node)

    def _units(self, what: str) -> list[_Unit]:
        logical: dict[int, int] = {}
        start = None
        skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENDMARKER, tokenize.ENCODING}
        try:
            for tok in tokenize.generate_tokens(io.StringIO(self.text).readline):
                if tok.type in skip:
                    continue
                if tok.type == tokenize.NEWLINE:
                    if start is not None:
                        logical[start] = min(tok.start[0], len(self.lines))
                        start = None
                    continue
                if start is None:
                    start = tok.start[0]
        except (tokenize.TokenError, SyntaxError) as exc:  # pragma: no cover - ast caught it
            line = getattr(exc, "lineno", 0) or 0
            raise StripError(f"{what} source cannot be tokenized: {exc}", line) from exc
        if start is not None:  # pragma: no cover - tokenize always ends with NEWLINE
            logical[start] = len(self.lines)
        units = []
        ln = 1
        while ln <= len(self.lines):
            last = logical.get(ln)
            if last is None:
                text = self.lines[ln - 1]
                units.append(_Unit(ln, ln, text, True))
                ln += 1
            else:
                units.append(_Unit(ln, last, "".join(self.lines[ln - 1:last]), False))
                ln = last + 1
        return units

    def offset(self, line: int, col: int) -> int:
        """Absolute character offset of an ast (line, UTF-8 byte column) position."""
        text = self.lines[line - 1]
        return self.starts[line - 1] + len(text.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.stmt) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def code_units(self, node: ast.stmt) -> range:
        return range(self.unit_of_line[node.lineno], self.unit_of_line[node.end_lineno] + 1)

    def segment(self, node: ast.stmt) -> str:
        start, end = self.span(node)
        line_start = self.starts[node.lineno - 1]
        prefix = self.text[line_start:start]
        if prefix.strip():
            prefix = " " * len(prefix)
        return textwrap.dedent(prefix + self.text[start:end]).strip()


# ---------------------------------------------------------------------------------------------
# Classification


def _bodies(node: ast.stmt) -> list[list[ast.stmt]]:
    out = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            out.append(value)
    for handler in getattr(node, "handlers", ()):
        out.append(handler.body)
    for case in getattr(node, "cases", ()):
        out.append(case.body)
    return out


def _last_name(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _is_pdb_module(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in PDB_MODULES
    # __import__("pdb").set_trace()
    return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
            and expr.func.id == "__import__" and len(expr.args) >= 1
            and isinstance(expr.args[0], ast.Constant) and expr.args[0].value in PDB_MODULES)


def _kind(stmt: ast.stmt, logging: bool) -> str | None:
    """The debug kind of a simple statement, or None when it is not debug output."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Name):
            return {"print": "print", "breakpoint": "breakpoint", "set_trace": "pdb"}.get(func.id)
        if isinstance(func, ast.Attribute):
            if func.attr in PDB_CALLS and _is_pdb_module(func.value):
                return "pdb"
            if logging and func.attr in LOG_METHODS and _last_name(func.value) in LOG_RECEIVERS:
                return "logging"
        return None
    if isinstance(stmt, ast.Import):
        if all(a.name.split(".")[0] in PDB_MODULES for a in stmt.names):
            return "pdb"
    elif isinstance(stmt, ast.ImportFrom):
        if stmt.level == 0 and (stmt.module or "").split(".")[0] in PDB_MODULES:
            return "pdb"
    return None


def _is_elif(src: _Source, stmt: ast.stmt, body: list[ast.stmt]) -> bool:
    if not (isinstance(stmt, ast.If) and body is stmt.orelse and len(body) == 1
            and isinstance(body[0], ast.If)):
        return False
    line = src.lines[body[0].lineno - 1]
    return line.encode("utf-8")[body[0].col_offset:].startswith(b"elif")


def _is_compound(stmt: ast.stmt) -> bool:
    return bool(_bodies(stmt))


def _leaves(stmt: ast.stmt):
    for body in _bodies(stmt):
        for s in body:
            if _is_compound(s):
                yield from _leaves(s)
            else:
                yield s


def _debug_only_kind(stmt: ast.stmt, logging: bool) -> str | None:
    """For a compound statement holding nothing but debug output (and ``pass``): the kind
    of its first debug statement."""
    if not isinstance(stmt, _WHOLE):
        return None
    first = None
    for leaf in _leaves(stmt):
        if isinstance(leaf, ast.Pass):
            continue
        kind = _kind(leaf, logging)
        if kind is None:
            return None
        first = first or kind
    return first


def _is_debug(stmt: ast.stmt, logging: bool) -> bool:
    if _is_compound(stmt):
        return _debug_only_kind(stmt, logging) is not None
    return _kind(stmt, logging) is not None


def _clause_header(src: _Source, stmt: ast.stmt, body: list[ast.stmt]) -> int | None:
    """The unit of the ``else:``/``finally:`` line heading ``body``, when ``body`` is such a
    clause of ``stmt`` that could be dropped whole (not an ``elif``, not on the header line,
    not the only clause of a ``try``)."""
    if body is getattr(stmt, "finalbody", None):
        if not getattr(stmt, "handlers", None):
            return None
        word = "finally"
    elif body is getattr(stmt, "orelse", None):
        word = "else"
    else:
        return None
    first = src.unit_of_line[body[0].lineno]
    u = first - 1
    while u >= 0 and src.units[u].trivia:
        u -= 1
    if u < 0:
        return None
    text = src.units[u].text.split("#", 1)[0].strip()
    return u if text.replace(" ", "") == word + ":" else None


def _unit_debug_kind(src: _Source, u: int, logging: bool) -> str | None:
    """The kind of a code unit made of debug statements only (None otherwise)."""
    stmts = src.unit_stmts[u]
    kinds = [None if _is_compound(s) else _kind(s, logging) for s in stmts]
    if not kinds or None in kinds:
        return None
    return kinds[0]


def _items(src: _Source, logging: bool) -> list[tuple[str, list[int]]]:
    """The code of ``src`` as diff items: one per code unit, except that a compound statement
    holding only debug output is one item, and so is an ``else:``/``finally:`` clause holding
    only debug output (so an added ``try:``/``else:`` line is never matched with an upstream
    one)."""
    groups: dict[int, int] = {}

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if not _is_compound(stmt):
                continue
            if _debug_only_kind(stmt, logging) is not None:
                groups[src.unit_of_line[stmt.lineno]] = src.unit_of_line[stmt.end_lineno]
                continue
            for inner in _bodies(stmt):
                header = _clause_header(src, stmt, inner)
                if header is not None and all(_is_debug(s, logging) for s in inner):
                    groups[header] = src.unit_of_line[inner[-1].end_lineno]
                else:
                    visit(inner)

    visit(src.tree.body)
    items = []
    u = 0
    while u < len(src.units):
        last = groups.get(u, u)
        units = [v for v in range(u, last + 1) if not src.units[v].trivia]
        if units:
            items.append(("".join(src.units[v].text for v in units), units))
        u = last + 1
    return items


def _bound_names(stmt: ast.Import | ast.ImportFrom) -> list[str] | None:
    names = []
    for alias in stmt.names:
        if alias.name == "*":
            return None
        if alias.asname:
            names.append(alias.asname)
        elif isinstance(stmt, ast.Import):
            names.append(alias.name.split(".")[0])
        else:
            names.append(alias.name)
    return names


def _summary(text: str, limit: int = 100) -> str:
    parts = [line.strip() for line in text.splitlines() if line.strip()]
    out = " ".join(parts) if parts else "<blank line>"
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _pair(olds: list[str], news: list[str]) -> list[tuple[int, int]]:
    """Order-preserving pairs (old index, new index) of a changed hunk: all of them when the
    counts agree, else greedily the lines that are similar enough to be edits of each other."""
    if len(olds) == len(news):
        return [(i, i) for i in range(len(olds))]
    pairs: list[tuple[int, int]] = []
    start = 0
    for i, old in enumerate(olds):
        for j in range(start, len(news)):
            if difflib.SequenceMatcher(None, old.strip(), news[j].strip()).ratio() >= 0.5:
                pairs.append((i, j))
                start = j + 1
                break
    return pairs


def _matcher(a: list[str], b: list[str]) -> difflib.SequenceMatcher:
    return difflib.SequenceMatcher(None, a, b, autojunk=False)


# ---------------------------------------------------------------------------------------------
# The stripper


class _Stripper:
    def __init__(self, current: str, expected: str | None):
        self.cur = _Source(current, "current")
        self.exp = _Source(expected, "expected") if expected is not None else None
        self.logging = self.exp is not None
        self.eligible = self._eligible_units()
        self.removed: dict[int, tuple[ast.stmt, str]] = {}  # id(stmt) -> (stmt, kind)
        self.texts: dict[int, str] = {}  # unit index -> new text ("" deletes the unit)
        # else/finally/elif clauses dropped whole: id(body) -> unit of the else:/finally: line
        self.dropped: dict[int, int | None] = {}

    # -- step 1: which units may lose statements ------------------------------------------
    def _eligible_units(self) -> set[int]:
        cur = self.cur
        if self.exp is None:
            return set(range(len(cur.units)))
        exp = self.exp
        exp_items = _items(exp, self.logging)
        cur_items = _items(cur, self.logging)
        sm = _matcher([t for t, _ in exp_items], [t for t, _ in cur_items])
        eligible: set[int] = set()
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            changed = [u for _, us in cur_items[j1:j2] for u in us]
            if tag == "insert":
                eligible.update(changed)
                continue
            # A changed hunk: what still matches unit by unit (the header of a block whose
            # body changed) is not new.
            olds = [u for _, us in exp_items[i1:i2] for u in us]
            inner = _matcher([exp.units[u].text for u in olds], [cur.units[u].text for u in changed])
            matched = {changed[j] for block in inner.get_matching_blocks()
                       for j in range(block.b, block.b + block.size)}
            olds = [u for k, u in enumerate(olds) if not any(
                block.a <= k < block.a + block.size for block in inner.get_matching_blocks())]
            changed = [u for u in changed if u not in matched]
            eligible.update(changed)
            # An edited upstream debug line is an edit, not an addition: keep it.
            upstream = [(u, _unit_debug_kind(exp, u, True)) for u in olds]
            upstream = [(u, k) for u, k in upstream if k is not None]
            for u in changed:
                kind = _unit_debug_kind(cur, u, True)
                if kind is None:
                    continue
                text = cur.units[u].text.strip()
                for pos, (i, k) in enumerate(upstream):
                    ratio = difflib.SequenceMatcher(None, exp.units[i].text.strip(), text).ratio()
                    if k == kind and ratio >= _EDIT_SIMILARITY:
                        eligible.discard(u)
                        del upstream[pos]
                        break
        return eligible

    def _all_eligible(self, stmt: ast.stmt) -> bool:
        return all(u in self.eligible for u in self.cur.code_units(stmt)
                   if not self.cur.units[u].trivia)

    # -- step 2: choose statements ------------------------------------------------------------
    def choose(self) -> None:
        imports: list[ast.Import | ast.ImportFrom] = []
        self._walk(self.cur.tree.body, imports)
        self._imports(imports)
        if self.exp is not None:
            self._clauses(self.cur.tree.body)

    def _clauses(self, body: list[ast.stmt]) -> None:
        """Mark added else/finally/elif clauses left with nothing to be dropped whole."""
        for stmt in body:
            if not _is_compound(stmt) or id(stmt) in self.removed:
                continue
            for inner in _bodies(stmt):
                self._clauses(inner)
                if not all(id(s) in self.removed for s in inner):
                    continue
                if _is_elif(self.cur, stmt, inner):
                    self.dropped[id(inner)] = None
                    continue
                header = _clause_header(self.cur, stmt, inner)
                if header is not None and header in self.eligible:
                    self.dropped[id(inner)] = header

    def _walk(self, body: list[ast.stmt], imports: list) -> None:
        for stmt in body:
            if _is_compound(stmt):
                if self.exp is not None and self._all_eligible(stmt):
                    kind = _debug_only_kind(stmt, self.logging)
                    if kind is not None:
                        self.removed[id(stmt)] = (stmt, kind)
                        continue
                for inner in _bodies(stmt):
                    self._walk(inner, imports)
                continue
            if self.cur.unit_of_line[stmt.lineno] not in self.eligible:
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if self.exp is not None or _kind(stmt, False) == "pdb":
                    imports.append(stmt)
                continue
            kind = _kind(stmt, self.logging)
            if kind is not None:
                self.removed[id(stmt)] = (stmt, kind)

    def _imports(self, imports: list) -> None:
        """Remove candidate imports whose names are used only by removed statements
        (pdb imports: by nothing that stays)."""
        if not imports:
            return
        in_removed: set[int] = set()
        for stmt, _ in self.removed.values():
            in_removed.update(id(n) for n in ast.walk(stmt) if isinstance(n, ast.Name))
        uses: dict[str, list[ast.Name]] = {}
        for node in ast.walk(self.cur.tree):
            if isinstance(node, ast.Name):
                uses.setdefault(node.id, []).append(node)
        for stmt in imports:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                continue
            names = _bound_names(stmt)
            if not names:
                continue
            kept = any(id(n) not in in_removed for name in names for n in uses.get(name, ()))
            dropped = any(id(n) in in_removed for name in names for n in uses.get(name, ()))
            kind = _kind(stmt, False)
            if not kept and (dropped or kind == "pdb"):
                self.removed[id(stmt)] = (stmt, kind or "import")

    # -- applying: edits per unit ---------------------------------------------------------------
    def apply(self) -> None:
        self._apply_body(self.cur.tree.body, module=True)

    def _is_removed(self, stmt: ast.stmt) -> bool:
        return id(stmt) in self.removed

    def _apply_body(self, body: list[ast.stmt], module: bool = False) -> None:
        cur = self.cur
        chains: list[list[ast.stmt]] = []
        for stmt in body:
            if chains and cur.unit_of_line[stmt.lineno] == cur.unit_of_line[chains[-1][-1].end_lineno]:
                chains[-1].append(stmt)
            else:
                chains.append([stmt])
        empty = not module and all(self._is_removed(s) for s in body)
        if id(body) in self.dropped:
            empty = False
            header = self.dropped[id(body)]
            if header is not None:
                for u in range(header, cur.unit_of_line[body[0].lineno]):
                    self.texts[u] = ""
        for n, chain in enumerate(chains):
            for stmt in chain:
                if _is_compound(stmt) and not self._is_removed(stmt):
                    for inner in _bodies(stmt):
                        self._apply_body(inner)
            if not any(self._is_removed(s) for s in chain):
                continue
            self._apply_chain(chain, need_pass=empty and n == 0)

    def _apply_chain(self, chain: list[ast.stmt], need_pass: bool) -> None:
        cur = self.cur
        first_u = cur.unit_of_line[chain[0].lineno]
        last_u = cur.unit_of_line[chain[-1].end_lineno]
        unit = cur.units[first_u]
        start, _ = cur.span(chain[0])
        _, end = cur.span(chain[-1])
        line_start = cur.starts[chain[0].lineno - 1]
        prefix = cur.text[line_start:start]
        own_line = not prefix.strip() and chain[0].lineno == unit.first
        kept = [i for i, s in enumerate(chain) if not self._is_removed(s)]
        if own_line and not kept:
            last_line = cur.lines[cur.units[last_u].last - 1]
            eol = last_line[len(last_line.rstrip("\r\n")):]
            for u in range(first_u, last_u + 1):
                self.texts[u] = ""
            if need_pass:
                self.texts[first_u] = prefix + "pass" + eol
            return
        # Edit inside the logical line (one unit): keep the surviving statements.
        assert first_u == last_u, "a statement chain is one logical line"
        if kept:
            pieces = []
            for pos, i in enumerate(kept):
                pieces.append(cur.text[slice(*cur.span(chain[i]))])
                if pos + 1 < len(kept):
                    sep_from = cur.span(chain[i])[1]
                    sep_to = cur.span(chain[i + 1])[0]
                    pieces.append(cur.text[sep_from:sep_to])
            new = "".join(pieces)
        else:
            new = "pass"
        base = cur.starts[unit.first - 1]
        text = self.texts.get(first_u, unit.text)
        self.texts[first_u] = text[: start - base] + new + text[end - base:]

    # -- step 3: blank lines and comments that came with removed statements ---------------------
    def _live(self) -> list[int]:
        return [i for i in range(len(self.cur.units)) if self.texts.get(i, None) != ""]

    def _text(self, u: int) -> str:
        return self.texts.get(u, self.cur.units[u].text)

    def trivia(self) -> None:
        """Drop the blank/comment lines that came with removed statements.

        Code lines that match ``expected`` (or are 1:1 edits of it) anchor the alignment;
        between two anchors where something was removed, the blank/comment lines are made
        those of ``expected`` when that is possible by dropping lines (dropped comments must
        touch a removed statement); otherwise only runs of added ones touching a removed
        statement go.
        """
        if self.exp is None:
            return
        deleted = {u for u, t in self.texts.items() if t == ""}
        if not deleted:
            return
        cur, exp = self.cur, self.exp
        live = self._live()
        live_code = [u for u in live if not cur.units[u].trivia]
        exp_code = [i for i, u in enumerate(exp.units) if not u.trivia]
        sm = _matcher([exp.units[i].text for i in exp_code], [self._text(u) for u in live_code])
        anchors = [(-1, -1)]
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                anchors.extend((exp_code[i1 + k], live_code[j1 + k]) for k in range(i2 - i1))
        anchors.append((len(exp.units), len(cur.units)))
        live_set = set(live)
        for (ea, ca), (eb, cb) in zip(anchors, anchors[1:]):
            if not any(u in deleted for u in range(ca + 1, cb)):
                continue
            gap_exp = list(range(ea + 1, eb))
            gap_cur = [u for u in range(ca + 1, cb) if u in live_set]
            if all(exp.units[i].trivia for i in gap_exp) and all(
                    cur.units[u].trivia for u in gap_cur) and self._gap_exact(gap_exp, gap_cur,
                                                                              deleted):
                continue
            self._gap_runs(gap_exp, gap_cur, ca, cb, deleted)

    def _gap_exact(self, gap_exp: list[int], gap_cur: list[int], deleted: set[int]) -> bool:
        """Make a blank/comment-only gap read as in ``expected`` by dropping lines."""
        want = [self.exp.units[i].text for i in gap_exp]
        drop = []
        k = 0
        for u in gap_cur:
            if k < len(want) and self._text(u) == want[k]:
                k += 1
            else:
                drop.append(u)
        if k < len(want):
            return False  # the upstream blank/comment lines were edited: not ours to decide
        # A dropped comment must touch a removed statement (directly or through other
        # dropped comments); a blank line may go anywhere in the gap.
        comments = {u for u in drop if self.cur.units[u].text.strip()}
        attached = set(deleted)
        grew = True
        while grew:
            grew = False
            for u in comments - attached:
                if u - 1 in attached or u + 1 in attached:
                    attached.add(u)
                    grew = True
        for u in drop:
            if u not in comments or u in attached:
                self.texts[u] = ""
        return True

    def _gap_runs(self, gap_exp: list[int], gap_cur: list[int], left: int, right: int,
                  deleted: set[int]) -> None:
        """Drop runs of added blank/comment lines that touch a removed statement."""
        cur, exp = self.cur, self.exp
        a = [exp.units[i].text for i in gap_exp]
        b = [self._text(u) for u in gap_cur]
        # Never drop more copies of a blank/comment line than this gap has beyond upstream's
        # (an upstream line deleted by hand shifts the alignment of the blank lines around it).
        excess = Counter(t for u, t in zip(gap_cur, b) if cur.units[u].trivia)
        excess.subtract(exp.units[i].text for i in gap_exp if exp.units[i].trivia)
        for tag, i1, i2, j1, j2 in _matcher(a, b).get_opcodes():
            # In a changed hunk, blank/comment lines may be edits of upstream ones: only when
            # the upstream side has none are they taken for additions.
            if tag == "equal" or (tag == "replace" and any(exp.units[i].trivia
                                                           for i in gap_exp[i1:i2])):
                continue
            j = j1
            while j < j2:  # maximal runs of blank/comment lines
                if not cur.units[gap_cur[j]].trivia:
                    j += 1
                    continue
                k = j
                while k < j2 and cur.units[gap_cur[k]].trivia:
                    k += 1
                self._drop_run(gap_cur, b, j, k, left, right, deleted, excess)
                j = k

    def _drop_run(self, units: list[int], b: list[str], j: int, k: int, left: int, right: int,
                  deleted: set[int], excess: Counter) -> None:
        n = len(units)
        length = k - j

        def touches(p: int) -> bool:
            lo = units[p - 1] + 1 if p > 0 else left + 1
            hi = units[p + length] - 1 if p + length < n else right - 1
            return any(u in deleted for u in range(lo, hi + 1))

        # The run may slide over identical lines; any position gives the same text.
        positions = [j]
        p = j
        while p > 0 and b[p - 1] == b[p - 1 + length]:
            p -= 1
            positions.append(p)
        p = j
        while p + length < n and b[p] == b[p + length]:
            p += 1
            positions.append(p)
        for p in positions:
            if touches(p):
                for u, text in zip(units[p:p + length], b[p:p + length]):
                    if excess[text] > 0:
                        excess[text] -= 1
                        self.texts[u] = ""
                return

    # -- step 4: report ---------------------------------------------------------------------
    def leftovers(self) -> tuple[Leftover, ...]:
        if self.exp is None:
            return ()
        live = self._live()
        b = [self._text(u) for u in live]
        a = [u.text for u in self.exp.units]
        out: list[Leftover] = []
        for tag, i1, i2, j1, j2 in _matcher(a, b).get_opcodes():
            if tag == "equal":
                continue
            olds = a[i1:i2]
            news = [(self.cur.units[live[j]].first, b[j]) for j in range(j1, j2)]
            pairs = _pair(olds, [t for _, t in news])
            oi = ni = 0
            for po, pn in pairs + [(len(olds), len(news))]:
                out.extend(Leftover(0, f"removed: {_summary(o)}") for o in olds[oi:po])
                out.extend(Leftover(line, f"added: {_summary(t)}") for line, t in news[ni:pn])
                if po < len(olds):
                    line, t = news[pn]
                    out.append(Leftover(line, f"changed: {_summary(olds[po])} -> {_summary(t)}"))
                oi, ni = po + 1, pn + 1
        return tuple(out)

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
