"""The statement walk that carries out one edit, and its entry at the edit's scope.

An edit is carried out by one walk over the statements of its scope's subtree, post-order
like a ``CSTTransformer`` (an inner block is edited before the block holding it) but never
descending into expressions: only an edit of expressions has libcst visit them, and only in
the statements that may hold its code.  Unchanged nodes are kept (not copied), so the
statement caches of :class:`.match._Ctx` stay valid across a file's edits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from .suites import _DEFS, _same, _suites

if TYPE_CHECKING:
    from .match import _Ctx

class _Editor:
    """One edit's hooks into the walk."""

    def __init__(self, ctx: _Ctx) -> None:
        self.ctx = ctx

    def exprs(self, original: cst.BaseStatement, updated: cst.BaseStatement, stack: list[str]) -> cst.BaseStatement:
        """``updated`` with its own expressions edited (a compound statement's, not its blocks')."""
        return updated

    def block(self, body: list[cst.BaseStatement], stack: list[str], top: bool) -> list[cst.BaseStatement]:
        """A block's statements (already walked) after the edit."""
        return body

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode, stack: list[str]) -> cst.CSTNode | list:
        return updated


def _walk_stmt(ed: _Editor, node: cst.BaseStatement, stack: list[str]) -> cst.BaseStatement | list:
    """``node`` after the edit: ``node`` itself where nothing changed, a list of statements
    where a def was replaced by several."""
    inner = [*stack, node.name.value] if isinstance(node, _DEFS) else stack
    depth = min(len(inner), len(ed.ctx.scope))
    if tuple(inner[:depth]) != ed.ctx.scope[:depth]:
        return node  # neither in nor around the scope
    if isinstance(node, cst.SimpleStatementLine):
        return ed.exprs(node, node, stack)
    new = ed.exprs(node, _suites(node, lambda b: _walk_block(ed, b, inner)), stack)
    return ed.leave_def(node, new, stack) if isinstance(node, _DEFS) else new


def _walk_body(ed: _Editor, body: Sequence[cst.BaseStatement], stack: list[str]) -> list[cst.BaseStatement]:
    out: list[cst.BaseStatement] = []
    for stmt in body:
        new = _walk_stmt(ed, stmt, stack)
        out.extend(new) if isinstance(new, list) else out.append(new)
    return out


def _walk_block(ed: _Editor, block: cst.IndentedBlock, stack: list[str]) -> cst.IndentedBlock:
    body = ed.block(_walk_body(ed, block.body, stack), stack, top=False)
    return block if _same(body, block.body) else block.with_changes(body=body)


def _walk_module(ed: _Editor, module: cst.Module) -> cst.Module:
    body = ed.block(_walk_body(ed, module.body, []), [], top=not ed.ctx.scope)
    return module if _same(body, module.body) else module.with_changes(body=body)


def _visit(module: cst.Module, scope: tuple[str, ...], editor: _Editor) -> cst.Module:
    """The module after ``editor``'s walk of the subtree of the def/class named by ``scope``
    (the whole module where ``scope`` is empty or not found along a chain of bodies)."""
    nodes: list[cst.CSTNode] = [module]
    chain: list[int] = []
    body: Sequence[cst.CSTNode] = module.body
    for name in scope:
        index = next((i for i, n in enumerate(body)
                      if isinstance(n, (cst.ClassDef, cst.FunctionDef)) and n.name.value == name), None)
        if index is None or not isinstance(body[index].body, cst.IndentedBlock):  # type: ignore[union-attr]
            return _walk_module(editor, module)  # let the edit report what it cannot find
        chain.append(index)
        nodes.append(body[index])
        body = body[index].body.body  # type: ignore[union-attr]
    if not scope:
        return _walk_module(editor, module)
    new: object = _walk_stmt(editor, nodes[-1], list(scope[:-1]))  # type: ignore[arg-type]
    if new is nodes[-1]:
        return module
    for parent, index in zip(reversed(nodes[:-1]), reversed(chain)):
        replacement = new if isinstance(new, list) else [new]
        if isinstance(parent, cst.Module):
            items = list(parent.body)
            items[index : index + 1] = replacement
            new = parent.with_changes(body=items)
        else:
            block = parent.body  # type: ignore[attr-defined]
            items = list(block.body)
            items[index : index + 1] = replacement
            new = parent.with_changes(body=block.with_changes(body=items))
    return new  # type: ignore[return-value]
