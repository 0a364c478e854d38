"""The checked side: the walk over one file.  It builds the file's scopes, binds its imports
(:mod:`.imports`), infers the vLLM types of its names (:mod:`.inference`), then checks every
call and attribute read (:mod:`.calls`)."""

from __future__ import annotations

import ast
from typing import Iterable

from .calls import _CallChecks
from .imports import _ImportChecks
from .index import _Index
from .inference import _TypeInference
from .objects import _Obj
from .overrides import _OverrideChecks
from .report import PRAGMA, Finding
from .scopes import _Scope, _walk_same_scope


class _FileChecker(_ImportChecks, _TypeInference, _CallChecks, _OverrideChecks):
    def __init__(self, path: str, source: str, index: _Index, modname: str = "",
                 is_pkg: bool = False, local_packages: frozenset = frozenset()):
        self.path = path
        self.modname = modname
        self.is_pkg = is_pkg
        self.local_packages = local_packages
        self.source = source
        self.index = index
        self.findings: list[Finding] = []
        self.notes: list[str] = []  # facts worth a line that are not findings
        self.calls_checked = 0
        self.calls_skipped = 0
        self.lines = source.splitlines()
        self.scopes: dict[int, _Scope] = {}
        self.parents: dict[int, ast.AST] = {}
        self.class_attr_types: dict[tuple[int, str], list[_Obj] | None] = {}
        self._reported: set[tuple[int, str, str]] = set()

    # --- reporting ------------------------------------------------------------------------

    def report(self, node: ast.AST | int, kind: str, message: str) -> None:
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        if 0 < line <= len(self.lines) and PRAGMA in self.lines[line - 1]:
            return
        key = (line, kind, message)
        if key not in self._reported:
            self._reported.add(key)
            self.findings.append(Finding(self.path, line, kind, message))

    # --- driver ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            tree = ast.parse(self.source, filename=self.path)
        except SyntaxError as exc:
            self.findings.append(Finding(self.path, exc.lineno or 0, "syntax-error",
                                         f"{exc.msg}"))
            return
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        module_scope = _Scope(tree, None, None)
        self.scopes[id(tree)] = module_scope
        self.tree = tree
        self.module_scope = module_scope
        self._build_scopes(tree.body, module_scope, None)
        # imports, scope by scope (module first so functions see module names)
        for scope in list(self.scopes.values()):
            body = scope.node.body if not isinstance(scope.node, ast.Lambda) else []
            failures, bindings = self._block_imports(body, scope)
            for f in failures:
                self.report(*f)
            for name, objs in bindings:
                if objs is None:
                    scope.unbound.add(name)
                    scope.names.pop(name, None)
                else:
                    scope.names[name] = objs
                    scope.unbound.discard(name)
        # local types: iterate so that ``x = f(); y = x.g()`` settles
        for _ in range(3):
            before = ({k: s.types for k, s in self.scopes.items()}, self.class_attr_types)
            new_class_attr: dict = {}
            new_types = {k: self._collect_types(s, new_class_attr)
                         for k, s in self.scopes.items()}
            for k, s in self.scopes.items():
                s.types = new_types[k]
            self.class_attr_types = new_class_attr
            if before == (new_types, new_class_attr):
                break
        # calls, and attribute reads on vLLM objects of known type
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                self._check_call(node)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self._check_attribute(node)
        # methods overriding a vLLM base's
        self._check_overrides()

    def _build_scopes(self, body: Iterable[ast.AST], scope: _Scope,
                      cls: ast.ClassDef | None) -> None:
        for node in body:
            for sub in _walk_same_scope(node):
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    owner = cls if sub is node else None
                    s = _Scope(sub, scope, owner)
                    self.scopes[id(sub)] = s
                    inner = sub.body if not isinstance(sub, ast.Lambda) else [sub.body]
                    self._build_scopes(inner, s, None)
                    # defaults/decorators stay in the enclosing scope (handled by walk)
                elif isinstance(sub, ast.ClassDef):
                    self._build_scopes(sub.body, scope, sub)

    def scope_of(self, node: ast.AST) -> _Scope:
        cur: ast.AST | None = self.parents.get(id(node))
        while cur is not None:
            s = self.scopes.get(id(cur))
            if s is not None:
                return s
            cur = self.parents.get(id(cur))
        raise LookupError("no scope")
