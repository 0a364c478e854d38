"""Calls and attribute reads in a checked file: a vLLM call binds to its signature, a method
or attribute used on a vLLM instance of known type exists; guarded uses are skipped."""

from __future__ import annotations

import ast

from .binding import _Sig, init_signature
from .objects import _BoundMethod, _Class, _Func, _Instance, _Obj, _is_vllm_def
from .report import PRAGMA
from .syntax import _catches, _decorator_name


class _CallChecks:
    """The call and attribute checks of :class:`.walker._FileChecker`."""

    def _check_attribute(self, node: ast.Attribute) -> None:
        """``obj.attr`` read (not called) where ``obj`` is a vLLM instance of known type."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Call) and parent.func is node:
            return  # a call: _check_call
        try:
            scope = self.scope_of(node)
        except LookupError:
            return
        bases = self._resolve(node.value, scope)
        if not bases or not all(isinstance(b, _Instance) for b in bases):
            return
        for b in bases:
            cls = b.cls  # type: ignore[union-attr]
            if self.index.class_member(cls, node.attr) is None:
                if not self._guarded(node, node.attr, "AttributeError"):
                    self.report(node, "missing-attribute",
                                f"{cls.name} has no attribute '{node.attr}' "
                                f"({cls.module.rel}:{cls.node.lineno})")
                return

    # --- calls ----------------------------------------------------------------------------

    def _check_call(self, call: ast.Call) -> None:
        try:
            scope = self.scope_of(call)
        except LookupError:
            return
        callees = self._resolve(call.func, scope, call)
        if not callees:
            return
        relevant = [c for c in callees if _is_vllm_def(c)]
        if not relevant:
            return
        line = call.lineno
        if 0 < line <= len(self.lines) and PRAGMA in self.lines[line - 1]:
            self.calls_skipped += 1
            return
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords):
            self.calls_skipped += 1
            return
        sigs: list[_Sig] = []
        for c in relevant:
            sig = self._signature(c)
            if sig is None:
                self.calls_skipped += 1
                return
            sigs.append(sig)
        if isinstance(call.func, ast.Attribute) and self._guarded(call, call.func.attr,
                                                                  "TypeError"):
            self.calls_skipped += 1
            return
        if self._guarded_type_error(call):
            self.calls_skipped += 1
            return
        self.calls_checked += 1
        kws = [k.arg for k in call.keywords if k.arg]
        results = [(s, s.bind(len(call.args), kws)) for s in sigs]
        if any(not problems for _, problems in results):
            return
        sig, problems = results[0]
        for p in problems:
            self.report(call, "bad-call", f"{sig.label} {p} ({sig.where})")

    def _guarded_type_error(self, call: ast.Call) -> bool:
        child: ast.AST = call
        cur = self.parents.get(id(call))
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda, ast.Module)):
            if isinstance(cur, ast.Try) and child in cur.body and any(
                    _catches(h, {"TypeError"}) for h in cur.handlers if h.type is not None):
                return True
            child = cur
            cur = self.parents.get(id(cur))
        return False

    def _signature(self, c: _Obj) -> _Sig | None:
        if isinstance(c, _Class):
            return init_signature(self.index, c)
        if isinstance(c, _Func):
            fn = c.node
            return _Sig.from_def(fn, f"{fn.name}(...)", c.module.rel,
                                 drop_first=False)
        if isinstance(c, _BoundMethod):
            fn = c.func.node
            decos = {_decorator_name(d) for d in fn.decorator_list}
            if "staticmethod" in decos:
                drop = False
            elif "classmethod" in decos:
                drop = True
            else:
                drop = c.bound
            return _Sig.from_def(fn, f"{c.cls.name}.{fn.name}(...)", c.func.module.rel,
                                 drop_first=drop)
        return None

    def _guarded(self, call: ast.Call, attr: str, error: str) -> bool:
        """Is ``call`` under a ``hasattr(..., attr)`` test or a try catching ``error``?"""
        child: ast.AST = call
        cur = self.parents.get(id(call))
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda, ast.Module)):
            tests: list[ast.AST] = []
            if isinstance(cur, (ast.If, ast.IfExp, ast.While)):
                tests.append(cur.test)
            elif isinstance(cur, ast.BoolOp):
                tests.extend(v for v in cur.values if v is not child)
            elif isinstance(cur, ast.comprehension):
                tests.extend(cur.ifs)
            elif isinstance(cur, ast.Try) and child in cur.body and any(
                    _catches(h, {error}) for h in cur.handlers if h.type is not None):
                return True
            for t in tests:
                for sub in ast.walk(t):
                    if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
                            and sub.func.id in ("hasattr", "getattr") and len(sub.args) >= 2
                            and isinstance(sub.args[1], ast.Constant)
                            and sub.args[1].value == attr):
                        return True
            child = cur
            cur = self.parents.get(id(cur))
        return False
