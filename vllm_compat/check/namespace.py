"""One module's top-level namespace: what each name is bound to, read from its :mod:`ast`."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .syntax import _is_type_checking, _target_names


@dataclass
class _Binding:
    kind: str  # "def" | "class" | "from" | "module" | "alias" | "value"
    node: ast.AST | None = None
    module: str = ""  # for "from": source module; for "module": module bound
    name: str = ""  # for "from": the imported name


class _Module:
    """One vLLM (or other) module found under the root: its top-level bindings."""

    def __init__(self, name: str, path: Path | None, is_pkg: bool, tree: ast.Module | None,
                 rel: str):
        self.name = name
        self.path = path
        self.rel = rel  # path relative to the root, for messages
        self.is_pkg = is_pkg
        self.opaque = tree is None and path is not None  # an extension module: unknown content
        self.bindings: dict[str, list[_Binding]] = {}
        self.type_only: set[str] = set()
        self.stars: list[str] = []
        self.has_getattr = False
        self.all_names: set[str] | None = None
        self.all_dynamic = False
        if tree is not None:
            self._collect(tree.body, type_checking=False)
            # names made at import time by globals()[...] = ... / globals().update(...)
            self.has_getattr |= any(
                _writes_globals(n)
                for st in tree.body if not isinstance(st, (ast.FunctionDef,
                                                           ast.AsyncFunctionDef,
                                                           ast.ClassDef))
                for n in ast.walk(st))

    def _package(self) -> str:
        return self.name if self.is_pkg else self.name.rpartition(".")[0]

    def absolute(self, module: str | None, level: int) -> str:
        if not level:
            return module or ""
        base = self._package()
        for _ in range(level - 1):
            base = base.rpartition(".")[0]
        return f"{base}.{module}" if module else base

    def _bind(self, name: str, b: _Binding, type_checking: bool) -> None:
        if type_checking:
            self.type_only.add(name)
        else:
            self.bindings.setdefault(name, []).append(b)

    def _collect(self, stmts: list[ast.stmt], type_checking: bool) -> None:
        for st in stmts:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if st.name == "__getattr__" and not type_checking:
                    self.has_getattr = True
                self._bind(st.name, _Binding("def", st), type_checking)
            elif isinstance(st, ast.ClassDef):
                self._bind(st.name, _Binding("class", st), type_checking)
            elif isinstance(st, ast.Import):
                for a in st.names:
                    if a.asname:
                        self._bind(a.asname, _Binding("module", module=a.name), type_checking)
                    else:
                        top = a.name.split(".")[0]
                        self._bind(top, _Binding("module", module=top), type_checking)
            elif isinstance(st, ast.ImportFrom):
                src = self.absolute(st.module, st.level)
                for a in st.names:
                    if a.name == "*":
                        if not type_checking:
                            self.stars.append(src)
                        continue
                    self._bind(a.asname or a.name, _Binding("from", module=src, name=a.name),
                               type_checking)
            elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                value = st.value
                for t in targets:
                    for n in _target_names(t):
                        if n == "__all__":
                            self._note_all(st)
                        if isinstance(st, ast.AugAssign):
                            continue
                        kind = "alias" if (isinstance(t, ast.Name) and isinstance(
                            value, (ast.Name, ast.Attribute))) else "value"
                        self._bind(n, _Binding(kind, value), type_checking)
            elif isinstance(st, ast.If):
                if _is_type_checking(st.test):
                    self._collect(st.body, True)
                    self._collect(st.orelse, type_checking)
                else:
                    self._collect(st.body, type_checking)
                    self._collect(st.orelse, type_checking)
            elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
                self._collect(st.body, type_checking)
                for h in st.handlers:
                    self._collect(h.body, type_checking)
                self._collect(st.orelse, type_checking)
                self._collect(st.finalbody, type_checking)
            elif isinstance(st, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                self._collect(st.body, type_checking)
                self._collect(getattr(st, "orelse", []), type_checking)

    def _note_all(self, st: ast.stmt) -> None:
        value = getattr(st, "value", None)
        names = _literal_strings(value)
        if names is None:
            self.all_dynamic = True
            return
        if isinstance(st, ast.AugAssign) and self.all_names is not None:
            self.all_names |= names
        else:
            self.all_names = (self.all_names or set()) | names


def _is_globals_call(n: ast.AST) -> bool:
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in ("globals", "vars") and not n.args)


def _writes_globals(n: ast.AST) -> bool:
    """``globals()[k] = v`` or ``globals().update(...)`` (not merely passing ``globals()``)."""
    if isinstance(n, (ast.Assign, ast.AugAssign)):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
        return any(isinstance(t, ast.Subscript) and _is_globals_call(t.value) for t in targets)
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("update", "setdefault", "__setitem__")
            and _is_globals_call(n.func.value))


def _literal_strings(node: ast.AST | None) -> set[str] | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = set()
        for e in node.elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.add(e.value)
            else:
                return None
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_strings(node.left), _literal_strings(node.right)
        if left is None or right is None:
            return None
        return left | right
    return None
