"""The shape of compound statements: their indented blocks, reached through else/except/finally/
case clauses and elif chains, and rebuilt only where one changed (shared by the walk and the
matcher, which imports nothing else of the walk)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

_SUITES = ("body", "orelse", "handlers", "finalbody", "cases")
_CLAUSES = (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase, cst.If)
_DEFS = (cst.FunctionDef, cst.ClassDef)
_EMPTY = cst.IndentedBlock(body=())


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _suites(node: cst.CSTNode, edit: Callable[[cst.IndentedBlock], cst.IndentedBlock]) -> cst.CSTNode:
    """``node`` (a compound statement) with ``edit`` applied to each of its indented blocks,
    through its else/except/finally/case clauses and elif chain; rebuilt only where one changed."""
    changes: dict[str, object] = {}
    for name in _SUITES:
        value = getattr(node, name, None)
        if isinstance(value, cst.IndentedBlock):
            new: object = edit(value)
        elif isinstance(value, _CLAUSES):
            new = _suites(value, edit)
        elif isinstance(value, (list, tuple)):
            items = [_suites(v, edit) for v in value]
            new = value if _same(items, value) else items
        else:
            continue
        if new is not value:
            changes[name] = new
    return node.with_changes(**changes) if changes else node
