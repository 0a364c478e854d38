"""Small questions about :mod:`ast` nodes that every part of the check asks."""

from __future__ import annotations

import ast
from typing import Iterator


def _target_names(t: ast.AST) -> Iterator[str]:
    if isinstance(t, ast.Name):
        yield t.id
    elif isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _target_names(e)
    elif isinstance(t, ast.Starred):
        yield from _target_names(t.value)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _decorator_name(d: ast.expr) -> str:
    if isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Name):
        return d.id
    if isinstance(d, ast.Attribute):
        return d.attr
    return ""


def _iter_body(stmts: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A class body's statements, looking into if/try blocks (but not TYPE_CHECKING)."""
    for st in stmts:
        if isinstance(st, ast.If):
            if not _is_type_checking(st.test):
                yield from _iter_body(st.body)
            yield from _iter_body(st.orelse)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            yield from _iter_body(st.body)
            for h in st.handlers:
                yield from _iter_body(h.body)
            yield from _iter_body(st.orelse)
            yield from _iter_body(st.finalbody)
        else:
            yield st


def _attr_targets(t: ast.AST) -> Iterator[ast.Attribute]:
    if isinstance(t, ast.Attribute):
        yield t
    elif isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _attr_targets(e)


def _annotation_head(ann: ast.expr) -> str:
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return ann.value.split("[", 1)[0].strip().rpartition(".")[2]
    if isinstance(ann, ast.Subscript):
        return _annotation_head(ann.value)
    if isinstance(ann, ast.Attribute):
        return ann.attr
    if isinstance(ann, ast.Name):
        return ann.id
    return ""


def _unwrap_optional(ann: ast.expr | None) -> ast.expr | None:
    """``X | None``, ``Optional[X]`` and ``"X"`` -> ``X``; other annotations unchanged."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        sides = [x for x in (ann.left, ann.right)
                 if not (isinstance(x, ast.Constant) and x.value is None)]
        return _unwrap_optional(sides[0]) if len(sides) == 1 else ann
    if isinstance(ann, ast.Subscript) and _annotation_head(ann.value) == "Optional":
        return _unwrap_optional(ann.slice)
    return ann


def _plain_annotation(ann: ast.expr) -> bool:
    return isinstance(ann, (ast.Name, ast.Attribute)) or (
        isinstance(ann, ast.Constant) and isinstance(ann.value, str)
        and ann.value.replace(".", "").replace("_", "").isalnum())


def _catches(handler: ast.ExceptHandler, names: set[str]) -> bool:
    t = handler.type
    if t is None:
        return True
    elts = t.elts if isinstance(t, ast.Tuple) else [t]
    for e in elts:
        n = e.id if isinstance(e, ast.Name) else (e.attr if isinstance(e, ast.Attribute) else "")
        if n in names:
            return True
    return False
