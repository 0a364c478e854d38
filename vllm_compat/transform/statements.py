"""The editors of statements: replace or insert a run of statements, replace a def or class."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ..catalog.patch import InsertAfter, ReplaceDef, ReplaceStmt
from .match import _Ctx, _dump_stmts, _find_run, _Pattern, _stmt_nodes
from .suites import _same
from .walk import _Editor


class _StmtEditor(_Editor):
    """Applies a statement-level edit to every statement block inside the scope."""

    def __init__(self, ctx: _Ctx, edit: ReplaceStmt | InsertAfter) -> None:
        super().__init__(ctx)
        self.edit = edit
        self.new_nodes = _stmt_nodes(edit.new)
        self.new = _Pattern.of(edit.new, self.new_nodes)
        old = edit.old if isinstance(edit, ReplaceStmt) else edit.after
        self.old = _Pattern.of(old) if old else _Pattern([], [], [], [])
        self.old_dump = self.old.dumps
        self.matches = 0
        self.present = 0

    def _edit_body(self, body: list[cst.BaseStatement], stack: list[str], top: bool) -> list[cst.BaseStatement]:
        if not self.ctx.in_scope(stack):
            return body
        self.present += len(_find_run(self.ctx, body, self.new))
        if isinstance(self.edit, ReplaceStmt):
            out, i = [], 0
            starts = set(_find_run(self.ctx, body, self.old))
            while i < len(body):
                if i in starts:
                    self.matches += 1
                    first = self.new_nodes[0].with_changes(leading_lines=body[i].leading_lines)
                    out.extend([first, *self.new_nodes[1:]])
                    i += len(self.old_dump)
                else:
                    out.append(body[i])
                    i += 1
            return out
        # InsertAfter
        if self.old_dump:
            points = [i + len(self.old_dump) for i in _find_run(self.ctx, body, self.old)]
        elif top:
            already = _find_run(self.ctx, body, self.new)
            points = [] if already else [_after_preamble(body, module=not self.ctx.scope)]
            self.matches += bool(already)
        else:
            points = []
        body = list(body)
        # The insertion is recognised by its first statement, so a later patch (ordered `after`
        # this one) may rewrite the rest, or move the inserted run elsewhere in this block,
        # without breaking t(t(x)) == t(x).
        moved = bool(points) and bool(_find_run(self.ctx, body, self.new.first()))
        for p in reversed(points):
            self.matches += 1
            if not moved and not _find_run(self.ctx, body[p : p + 1], self.new.first()):
                body[p:p] = self.new_nodes
        return body

    def block(self, body: list[cst.BaseStatement], stack: list[str], top: bool) -> list[cst.BaseStatement]:
        if not self.old_dump and isinstance(self.edit, InsertAfter) and not top:
            return body  # preamble insertion happens once, on the scope's own body
        return self._edit_body(body, stack, top)

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode, stack: list[str]) -> cst.CSTNode:
        name = original.name.value  # type: ignore[attr-defined]
        if self.old_dump or not isinstance(self.edit, InsertAfter) or (*stack, name) != self.ctx.scope:
            return updated
        block = updated.body  # type: ignore[attr-defined]
        body = self._edit_body(list(block.body), [*stack, name], top=True)  # the body belongs to the scope
        return updated if _same(body, block.body) else updated.with_changes(body=block.with_changes(body=body))


def _after_preamble(body: Sequence[cst.CSTNode], module: bool) -> int:
    """Index after a docstring and (at module level) the leading imports."""
    i = 0
    if body and _is_docstring(body[0]):
        i = 1
    if module:
        while i < len(body) and _is_import(body[i]):
            i += 1
    return i


def _is_docstring(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.SimpleStatementLine)
        and len(node.body) == 1
        and isinstance(node.body[0], cst.Expr)
        and isinstance(node.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_import(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body)
    if isinstance(node, cst.Try):  # try: import x / except ImportError: ...
        return all(_is_import(s) for s in node.body.body)
    return False


def _shape(node: cst.CSTNode) -> tuple[str, ...]:
    """The types of the statements in a def's body, a line's small statements one by one:
    defs with equal ASTs have equal shapes."""
    return tuple(type(x).__name__ for s in node.body.body  # type: ignore[attr-defined]
                 for x in (s.body if isinstance(s, cst.SimpleStatementLine) else (s,)))


class _DefReplacer(_Editor):
    def __init__(self, ctx: _Ctx, edit: ReplaceDef) -> None:
        super().__init__(ctx)
        self.new_nodes = _stmt_nodes(edit.new)
        self.new_dump = _dump_stmts(edit.new)
        self.found = 0

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode, stack: list[str]) -> cst.CSTNode | list:
        if (*stack, original.name.value) != self.ctx.scope:  # type: ignore[attr-defined]
            return updated
        self.found += 1
        new = self.new_nodes
        if len(new) == 1 and type(new[0]) is type(original) and _shape(new[0]) == _shape(original) \
                and self.ctx.stmt_dump(original) == self.new_dump:
            return updated  # (a def of another shape differs: no need to dump it)
        first = self.new_nodes[0].with_changes(leading_lines=original.leading_lines)  # type: ignore[attr-defined]
        return [first, *self.new_nodes[1:]]
