"""The scopes of a checked file: what its names are bound to, function by function."""

from __future__ import annotations

import ast
from typing import Iterator, Union

from .objects import _Obj
from .syntax import _decorator_name

_ScopeNode = Union[ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda]


class _Scope:
    def __init__(self, node: _ScopeNode, parent: "_Scope | None", cls: ast.ClassDef | None):
        self.node = node
        self.parent = parent
        self.cls = cls  # the class a method belongs to (for self.attr types)
        self.names: dict[str, list[_Obj]] = {}  # imports: name -> what it is
        self.unbound: set[str] = set()  # imported names whose import did not resolve
        self.types: dict[str, list[_Obj] | None] = {}  # local variables: instance types
        self.self_name = ""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and cls is not None:
            if node.args.args and not any(_decorator_name(d) == "staticmethod"
                                          for d in node.decorator_list):
                self.self_name = node.args.args[0].arg

    def lookup(self, name: str) -> list[_Obj] | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            if name in s.unbound:
                return None
            if name in s.types:
                return s.types[name]
            s = s.parent
        return None


def _walk_same_scope(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and its descendants, stopping at (but yielding) nested functions/classes."""
    yield node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        # decorators, defaults and bases are evaluated in the enclosing scope
        extra: list[ast.AST] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            extra = list(node.decorator_list) + list(node.args.defaults) + [
                d for d in node.args.kw_defaults if d is not None]
        elif isinstance(node, ast.ClassDef):
            extra = list(node.decorator_list) + list(node.bases)
        elif isinstance(node, ast.Lambda):
            extra = list(node.args.defaults)
        for e in extra:
            yield from _walk_same_scope(e)
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk_same_scope(child)
