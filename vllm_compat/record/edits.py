"""A hand edit of one Python file, expressed as the engine's edits (:mod:`vllm_compat.patch`).

The two versions are compared statement by statement (with libcst, so comments and layout
count), block by block: where a def, class or compound statement keeps its own lines the walk
goes into its blocks.  Each change takes the finest form that, carried out by the engine's own
transform on the file as it is so far, gives exactly the edited bytes and is a fixed point
there: a keyword added or removed, one expression replaced, then the statements replaced or
inserted with more and more context, then the enclosing def or class replaced whole.  A change
of comments or layout alone that no form reproduces is left out and reported, since the code
is the same.
"""

from __future__ import annotations

import ast
import difflib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from ..catalog.patch import AddKeyword, Edit, InsertAfter, RemoveKeyword, ReplaceDef, ReplaceExpr, ReplaceStmt
from ..transform import TransformError, apply_edits

__all__ = ["RecordError", "Recorded", "record_edits"]

_CLAUSES = (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase, cst.If)
_DEFS = (cst.FunctionDef, cst.ClassDef)
_CONTEXT = ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (0, 2), (2, 2), (3, 3))  # statements before, after
_CONTEXT_LINES = 12  # a longer statement (a whole def or class) is no context: the patch would hold it
Path = tuple  # ((statement index, accessor of one of its blocks), ...) from the module down


class RecordError(Exception):
    """The edit cannot be expressed as edits that reproduce it."""


@dataclass(frozen=True)
class Recorded:
    edits: tuple[Edit, ...]
    difference: str  # "" when the edits give the edited bytes; else a diff (edited -> what they give)


def record_edits(rel: str, base: str, edited: str) -> Recorded:
    """Edits that turn ``base`` into ``edited`` (the same bytes, or the same AST with the
    difference stated); raises :class:`RecordError` where there are none."""
    try:
        base_mod, edited_mod = cst.parse_module(base), cst.parse_module(edited)
    except cst.ParserSyntaxError as exc:
        raise RecordError(f"{rel} does not parse: line {exc.raw_line}: {exc.message}") from None
    solver = _Solver(rel, base_mod, edited_mod)
    if not solver.block((), (), edited_mod.body):
        raise RecordError(f"{rel}: {solver.failure}")
    edits = tuple(solver.edits)
    final = _apply(rel, base, edits) if edits else base
    if final == edited:
        return Recorded(edits, "")
    if final is None or _dump(final) != _dump(edited):
        raise RecordError(f"{rel}: the edits found do not reproduce the edited code")
    diff = difflib.unified_diff(edited.splitlines(keepends=True), final.splitlines(keepends=True),
                                f"{rel} (your edit)", f"{rel} (the recorded patch)")
    return Recorded(edits, "".join(diff))


def _dump(code: str) -> str:
    return ast.dump(ast.parse(code))


def _apply(rel: str, source: str, edits: Sequence[Edit]) -> str | None:
    try:
        return apply_edits(source, [("record", e) for e in edits], rel)
    except (TransformError, cst.ParserSyntaxError, SyntaxError, ValueError):
        return None


# -- the tree: blocks by path ------------------------------------------------------------------

def _suites(node: cst.CSTNode, acc: tuple = ()) -> list[tuple[tuple, cst.IndentedBlock]]:
    """``(accessor, block)`` of each indented block of a compound statement, through its
    else/except/finally/case clauses and elif chain."""
    out = []
    for name in ("body", "orelse", "handlers", "finalbody", "cases"):
        value = getattr(node, name, None)
        if isinstance(value, cst.IndentedBlock):
            out.append(((*acc, name), value))
        elif isinstance(value, _CLAUSES):
            out += _suites(value, (*acc, name))
        elif isinstance(value, (list, tuple)) and not isinstance(node, cst.SimpleStatementLine):
            for i, item in enumerate(value):
                out += _suites(item, (*acc, name, i))
    return out


def _get(node, acc: tuple):
    for step in acc:
        node = node[step] if isinstance(step, int) else getattr(node, step)
    return node


def _set(node, acc: tuple, value):
    if not acc:
        return value
    step, rest = acc[0], acc[1:]
    if isinstance(step, int):
        items = list(node)
        items[step] = _set(items[step], rest, value)
        return items
    return node.with_changes(**{step: _set(getattr(node, step), rest, value)})


def _block_at(module: cst.Module, path: Path) -> Sequence[cst.BaseStatement]:
    body = module.body
    for i, acc in path:
        body = _get(body[i], acc).body
    return body


def _with_block(module: cst.Module, path: Path, new_body: list) -> cst.Module:
    def rebuild(body: Sequence, path: Path) -> list:
        (i, acc), rest = path[0], path[1:]
        block = _get(body[i], acc)
        inner = new_body if not rest else rebuild(block.body, rest)
        return [*body[:i], _set(body[i], acc, block.with_changes(body=inner)), *body[i + 1 :]]

    return module.with_changes(body=new_body if not path else rebuild(module.body, path))


def _own(module: cst.Module, node: cst.CSTNode) -> str:
    """A compound statement's own code: its blocks emptied (with its leading lines)."""
    for acc, _ in _suites(node):
        node = _set(node, acc, cst.IndentedBlock(body=()))
    return module.code_for_node(node)


def _code(parts: Sequence[tuple[cst.CSTNode, cst.Module]]) -> str:
    """The code of statements, as an edit states it (the first one's leading lines dropped:
    the transform keeps those of the code it replaces)."""
    text = "".join(mod.code_for_node(n.with_changes(leading_lines=()) if k == 0 else n)
                   for k, (n, mod) in enumerate(parts))
    return textwrap.dedent(text).strip()


# -- finer forms inside one statement ----------------------------------------------------------

def _differences(a: ast.AST, b: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """The pairs of nodes, outermost first, along which ``a`` and ``b`` differ in exactly one place."""
    out = [(a, b)]
    while type(a) is type(b):
        diffs = [(x, y) for (_, x), (_, y) in zip(ast.iter_fields(a), ast.iter_fields(b)) if _differ(x, y)]
        if len(diffs) != 1:
            break
        x, y = diffs[0]
        if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            pairs = [(p, q) for p, q in zip(x, y) if _differ(p, q)]
            if len(pairs) != 1:
                break
            x, y = pairs[0]
        if not (isinstance(x, ast.AST) and isinstance(y, ast.AST)):
            break
        a, b = x, y
        out.append((a, b))
    return out


def _differ(x: object, y: object) -> bool:
    if isinstance(x, list) and isinstance(y, list):
        return len(x) != len(y) or any(_differ(p, q) for p, q in zip(x, y))
    if isinstance(x, ast.AST) and isinstance(y, ast.AST):
        return ast.dump(x) != ast.dump(y)
    return x != y


def _expression_forms(rel: str, scope: str, a_code: str, b_code: str) -> list[list[Edit]]:
    """A keyword argument added or removed, or one expression replaced."""
    try:
        chain = _differences(ast.parse(a_code), ast.parse(b_code))
    except (SyntaxError, ValueError):
        return []
    out: list[list[Edit]] = []
    seg = ast.get_source_segment
    a, b = chain[-1]
    if isinstance(a, ast.Call) and isinstance(b, ast.Call) and ast.dump(a.func) == ast.dump(b.func) \
            and not _differ(a.args, b.args):
        ka = {k.arg: ast.dump(k.value) for k in a.keywords}
        kb = {k.arg: ast.dump(k.value) for k in b.keywords}
        added, removed = set(kb) - set(ka), set(ka) - set(kb)
        call = seg(a_code, a.func)
        if len(added) == 1 and not removed and None not in added and all(kb[k] == v for k, v in ka.items()):
            kw = next(k for k in b.keywords if k.arg in added)
            out.append([AddKeyword(rel, scope, call=call, keyword=kw.arg, value=seg(b_code, kw.value))])
        if len(removed) == 1 and not added and None not in removed and all(ka[k] == v for k, v in kb.items()):
            out.append([RemoveKeyword(rel, scope, call=call, keyword=next(iter(removed)))])
    for a, b in reversed(chain):  # the smallest expression first
        if isinstance(a, ast.expr) and isinstance(b, ast.expr):
            old, new = seg(a_code, a), seg(b_code, b)
            if old and new and "\n" not in old:
                out.append([ReplaceExpr(rel, scope, old=old, new=new)])
    return out


# -- the solver ----------------------------------------------------------------------------------

class _Solver:
    """Walks the edited tree against the base tree; ``merged`` is the base with the changes
    expressed so far, ``text`` what ``edits`` give on the base (checked).

    Inside a block a change takes an exact form or is left to the statement holding the
    block; only in the module's own block, where nothing holds it, may a form give the same
    AST without the same bytes (an insertion's leading comment or blank lines: the transform
    drops those of the first statement it inserts)."""

    def __init__(self, rel: str, base: cst.Module, edited: cst.Module) -> None:
        self.rel, self.edited = rel, edited
        self.merged, self.text = base, base.code
        self.edits: list[Edit] = []
        self.failure = ""

    def _same(self, target: cst.Module) -> bool:
        return self.text == target.code

    def _save(self) -> tuple:
        return self.merged, self.text, list(self.edits)

    def _restore(self, saved: tuple) -> None:
        self.merged, self.text, self.edits = saved[0], saved[1], list(saved[2])

    def _attempt(self, edits: list[Edit], target: cst.Module, exact: bool = True, fixed: bool = True) -> bool:
        want = target.code
        out = _apply(self.rel, self.text, edits)
        if out is None or (out != want if exact else _dump(out) != _dump(want)) or \
                (fixed and _apply(self.rel, out, edits) != out):
            return False  # not the edited code, or not a fixed point on it
        self.edits += edits  # in the order checked: right to left
        # (of the same AST only at the module's level, right to left: what is left of it
        # keeps its indexes in the file as it now is)
        self.merged, self.text = (target if out == want else cst.parse_module(out)), out
        return True

    def _try_forms(self, path: Path, forms: list[list[Edit]], target: cst.Module) -> bool:
        """The first form that gives the edited bytes and is a fixed point there; in the
        module's own block, else one that gives the same AST, else one that is no fixed point
        (an insertion before the first statement: apply starts from the pristine file, so it
        never meets its own result)."""
        tiers = ((True, True), (False, True), (True, False), (False, False)) if not path else ((True, True),)
        return any(self._attempt(f, target, exact, fixed) for exact, fixed in tiers for f in forms)

    def block(self, path: Path, scope: tuple[str, ...], new_body: Sequence[cst.BaseStatement]) -> bool:
        cur = _block_at(self.merged, path)
        keys_a = [self.merged.code_for_node(s) for s in cur]
        keys_b = [self.edited.code_for_node(s) for s in new_body]
        ops = [op for op in difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_opcodes() if op[0] != "equal"]
        # Right to left: the base's indexes of what is left of a change stay valid.
        return all(self._hunk(path, scope, tag, i1, i2, list(new_body[j1:j2])) for tag, i1, i2, j1, j2 in reversed(ops))

    def _hunk(self, path: Path, scope: tuple[str, ...], tag: str, i1: int, i2: int, new: list) -> bool:
        cur = list(_block_at(self.merged, path))
        target = _with_block(self.merged, path, cur[:i1] + new + cur[i2:])
        if tag == "replace" and i2 - i1 == len(new):
            saved = self._save()
            if all(self._pair(path, scope, i1 + k, new[k]) for k in reversed(range(len(new)))) and self._same(target):
                return True
            self._restore(saved)
        if not (tag == "replace" and i2 - i1 == len(new) == 1):  # (a pair tried its own forms)
            if self._try_forms(path, list(self._forms(path, scope, tag, i1, i2, new)), target):
                return True
        if _dump(target.code) == _dump(self.merged.code):
            return True  # comments or layout alone: left out, reported as the difference
        line = self.edited.code[: self.edited.code.find(self.edited.code_for_node(new[0]))].count("\n") + 1 if new else 0
        self.failure = (f"no edit reproduces the change near line {line}" if line else
                        f"no edit reproduces the removal in {'.'.join(scope) or 'the module'}")
        return False

    def _pair(self, path: Path, scope: tuple[str, ...], i: int, b: cst.BaseStatement) -> bool:
        cur = list(_block_at(self.merged, path))
        a = cur[i]
        if self.merged.code_for_node(a) == self.edited.code_for_node(b):
            return True
        target = _with_block(self.merged, path, [*cur[:i], b, *cur[i + 1 :]])
        suites_a, suites_b = _suites(a), _suites(b)
        if type(a) is type(b) and not isinstance(a, cst.SimpleStatementLine) and len(suites_a) == len(suites_b) \
                and [x for x, _ in suites_a] == [y for y, _ in suites_b] and _own(self.merged, a) == _own(self.edited, b):
            saved = self._save()
            inner = (*scope, a.name.value) if isinstance(a, _DEFS) else scope
            if all(self.block((*path, (i, acc)), inner, blk.body) for acc, blk in reversed(suites_b)) \
                    and self._same(target):
                return True
            self._restore(saved)
        return self._try_forms(path, list(self._forms(path, scope, "replace", i, i + 1, [b])), target)

    def _forms(self, path: Path, scope: tuple[str, ...], tag: str, i1: int, i2: int, new: list):
        """Candidate edits for replacing ``cur[i1:i2]`` by ``new``, finest first (generated
        lazily: each is tried on the whole file)."""
        cur = list(_block_at(self.merged, path))
        m, e, rel, sc = self.merged, self.edited, self.rel, ".".join(scope)
        small = [m.code_for_node(s).count("\n") <= _CONTEXT_LINES for s in cur]  # fit to be context
        old = [(s, m) for s in cur[i1:i2]]
        nw = [(s, e) for s in new]
        if tag == "replace" and len(old) == len(nw) == 1:
            if type(cur[i1]) is type(new[0]):
                yield from _expression_forms(rel, sc, _code(old), _code(nw))
                if isinstance(cur[i1], _DEFS) and cur[i1].name.value == new[0].name.value:  # in its header
                    yield from _expression_forms(rel, ".".join((*scope, cur[i1].name.value)), _code(old), _code(nw))
        if tag == "insert":
            if i1 == len(cur) and len(new) == 1 and isinstance(new[0], _DEFS):
                yield [ReplaceDef(rel, ".".join((*scope, new[0].name.value)), new=_code(nw), create=True)]
            if i1 > 0 and small[i1 - 1]:
                anchor = [(cur[i1 - 1], m)]
                yield [InsertAfter(rel, sc, after=_code(anchor), new=_code(nw))]
                # The insertion drops the comments and blank lines above its first statement;
                # a replacement of equal code with the anchor as context puts them back (the
                # transform keeps the leading lines of what it replaces only for the first).
                both = _code(anchor + nw)
                yield [InsertAfter(rel, sc, after=_code(anchor), new=_code(nw)), ReplaceStmt(rel, sc, old=both, new=both)]
            elif i1 == 0:
                yield [InsertAfter(rel, sc, after="", new=_code(nw))]
        for before, after in _CONTEXT:
            lo, hi = i1 - before, i2 + after
            if lo < 0 or hi > len(cur) or (lo == hi) or (tag == "delete" and before + after == 0) \
                    or not all(small[lo:i1] + small[i2:hi]):
                continue
            left, right = [(s, m) for s in cur[lo:i1]], [(s, m) for s in cur[i2:hi]]
            yield [ReplaceStmt(rel, sc, old=_code(left + old + right), new=_code(left + nw + right))]
        # At last, a whole def or class as context (where the statements around are no smaller).
        if tag == "insert" and i1 > 0 and not small[i1 - 1]:
            yield [InsertAfter(rel, sc, after=_code([(cur[i1 - 1], m)]), new=_code(nw))]
        for lo, hi in ((i1 - 1, i2), (i1, i2 + 1)):
            if 0 <= lo and hi <= len(cur) and not all(small[lo:i1] + small[i2:hi]):
                left, right = [(s, m) for s in cur[lo:i1]], [(s, m) for s in cur[i2:hi]]
                yield [ReplaceStmt(rel, sc, old=_code(left + old + right), new=_code(left + nw + right))]
        if tag == "replace" and len(old) == len(nw) == 1 and isinstance(cur[i1], _DEFS) \
                and type(cur[i1]) is type(new[0]) and cur[i1].name.value == new[0].name.value:
            # Last: unlike the forms above it does not check what it replaces (a def that another
            # patch changed would be overwritten), but it keeps the def's leading lines.
            yield [ReplaceDef(rel, ".".join((*scope, cur[i1].name.value)), new=_code(nw))]
