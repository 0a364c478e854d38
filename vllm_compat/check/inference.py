"""Local type inference in a checked file: which names, ``self`` attributes and expressions
hold vLLM instances of a known class, and what an expression resolves to in the index."""

from __future__ import annotations

import ast

from .objects import _BoundMethod, _Class, _Func, _Instance, _Mod, _Obj, _is_vllm_def, _key
from .scopes import _Scope, _walk_same_scope
from .syntax import _plain_annotation, _unwrap_optional


class _TypeInference:
    """The type inference and name resolution of :class:`.walker._FileChecker`."""

    def _collect_types(self, scope: _Scope, class_attr: dict) -> dict:
        """One round of local type inference for ``scope`` (flow-insensitive: a name assigned
        two different things, or anything unknown, has no type)."""
        node = scope.node
        assigned: dict[str, list[_Obj] | None] = {}

        def note(store: dict, key, value: list[_Obj] | None) -> None:
            if key in store and store[key] != value:
                old = store[key]
                if old is None or value is None or {_key(o) for o in old} != {
                        _key(o) for o in value}:
                    store[key] = None
                    return
            store[key] = value

        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            params = a.posonlyargs + a.args + a.kwonlyargs + [
                x for x in (a.vararg, a.kwarg) if x is not None]
            for i, p in enumerate(params):
                if p.arg == scope.self_name and i == 0:
                    continue
                t = None
                if p.annotation is not None and p not in (a.vararg, a.kwarg):
                    t = self._annotation_type(p.annotation, scope)
                assigned[p.arg] = t or None
        body = node.body if not isinstance(node, ast.Lambda) else [node.body]
        for stmt in body:
            for sub in _walk_same_scope(stmt):
                targets: list[ast.AST] = []
                value = None
                if isinstance(sub, ast.Assign):
                    targets, value = sub.targets, sub.value
                elif isinstance(sub, ast.AnnAssign):
                    targets, value = [sub.target], sub.value
                    t = self._annotation_type(sub.annotation, scope)
                    if t:
                        self._note_target(sub.target, t, scope, assigned, note, class_attr)
                        continue
                elif isinstance(sub, ast.NamedExpr):
                    targets, value = [sub.target], sub.value
                elif isinstance(sub, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                    tg = [sub.target] if isinstance(sub, (ast.For, ast.AsyncFor)) else [
                        i.optional_vars for i in sub.items if i.optional_vars is not None]
                    for t in tg:
                        self._note_target(t, None, scope, assigned, note, class_attr)
                    continue
                else:
                    continue
                if value is None:
                    continue
                if isinstance(value, ast.Constant) and value.value is None:
                    continue  # x = None initialisations do not decide a type
                t = self._infer(value, scope) if len(targets) == 1 else None
                for tgt in targets:
                    self._note_target(tgt, t, scope, assigned, note, class_attr)
        return {k: v for k, v in assigned.items() if k not in scope.names}

    def _note_target(self, tgt, t, scope: _Scope, assigned: dict, note, class_attr: dict
                     ) -> None:
        if isinstance(tgt, ast.Name):
            note(assigned, tgt.id, t)
        elif isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name) and (
                scope.self_name and tgt.value.id == scope.self_name and scope.cls is not None):
            note(class_attr, (id(scope.cls), tgt.attr), t)
        elif isinstance(tgt, (ast.Tuple, ast.List)):
            for e in tgt.elts:
                self._note_target(e, None, scope, assigned, note, class_attr)
        elif isinstance(tgt, ast.Starred):
            self._note_target(tgt.value, None, scope, assigned, note, class_attr)

    def _local_def(self, func: ast.expr, scope: _Scope
                   ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The checked file's own function or method that ``func`` names, if any."""
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and scope.cls is not None and scope.self_name
                and func.value.id == scope.self_name):
            for st in scope.cls.body:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        st.name == func.attr):
                    return st
            return None
        if isinstance(func, ast.Name) and scope.lookup(func.id) is None:
            for st in self.tree.body:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        st.name == func.id):
                    return st
        return None

    def _annotation_type(self, ann: ast.expr | None, scope: _Scope) -> list[_Obj] | None:
        ann = _unwrap_optional(ann)
        if not isinstance(ann, (ast.Name, ast.Attribute)):
            return None
        objs = self._resolve(ann, scope)
        if objs and all(isinstance(o, _Class) and _is_vllm_def(o) for o in objs):
            return [_Instance(o) for o in objs]  # type: ignore[arg-type]
        return None

    def _infer(self, expr: ast.expr, scope: _Scope) -> list[_Obj] | None:
        """The vLLM instance types ``expr`` evaluates to, or None when unknown."""
        if isinstance(expr, ast.Call):
            local = self._local_def(expr.func, scope)
            if local is not None:
                if local.returns is None:
                    return None
                return self._annotation_type(local.returns, self.module_scope)
            callees = self._resolve(expr.func, scope)
            if not callees:
                return None
            out: list[_Obj] = []
            for c in callees:
                if isinstance(c, _Class):
                    if not _is_vllm_def(c):
                        return None
                    out.append(_Instance(c))
                elif isinstance(c, (_Func, _BoundMethod)):
                    f = c.func if isinstance(c, _BoundMethod) else c
                    ret = _unwrap_optional(f.node.returns)
                    if ret is None or not _plain_annotation(ret):
                        return None
                    r = self.index.eval_in_module(f.module, ret)
                    if not r or not all(isinstance(x, _Class) and _is_vllm_def(x) for x in r):
                        return None
                    out.extend(_Instance(x) for x in r)  # type: ignore[arg-type]
                else:
                    return None
            return out or None
        if isinstance(expr, (ast.Name, ast.Attribute)):
            objs = self._resolve(expr, scope)
            if objs and all(isinstance(o, _Instance) for o in objs):
                return objs
        return None

    # --- expressions ----------------------------------------------------------------------

    def _resolve(self, expr: ast.expr, scope: _Scope, call: ast.Call | None = None
                 ) -> list[_Obj] | None:
        """What ``expr`` is, as far as vLLM is concerned; None when unknown/not vLLM."""
        if isinstance(expr, ast.Name):
            return scope.lookup(expr.id)
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Name) and expr.func.id == "super" and not expr.args:
                return self._super(scope)
            return self._infer(expr, scope)
        if isinstance(expr, ast.Attribute):
            v = expr.value
            if (isinstance(v, ast.Name) and scope.self_name and v.id == scope.self_name
                    and scope.cls is not None and v.id not in scope.names):
                t = self.class_attr_types.get((id(scope.cls), expr.attr))
                return t if t else None
            bases = self._resolve(v, scope)
            if not bases:
                return None
            out: list[_Obj] = []
            for b in bases:
                r = self._member(b, expr.attr, expr, call)
                if r is None:
                    return None
                out.extend(r)
            return out or None
        return None

    def _super(self, scope: _Scope) -> list[_Obj] | None:
        """``super()`` in a method of a class whose first base is a vLLM class."""
        if scope.cls is None or not scope.self_name or not scope.cls.bases:
            return None
        first = self._resolve(scope.cls.bases[0], scope.parent or scope)
        if first and len(first) == 1 and isinstance(first[0], _Class) and _is_vllm_def(first[0]):
            return [_Instance(first[0])]
        return None

    def _member(self, base: _Obj, attr: str, node: ast.Attribute, call: ast.Call | None
                ) -> list[_Obj] | None:
        idx = self.index
        if isinstance(base, _Mod):
            found = idx.lookup(base.module, attr)
            if not found:
                if call is not None:
                    self.report(node, "missing-attribute",
                                f"module '{base.module.name}' has no attribute '{attr}' "
                                f"({base.module.rel})")
                return None
            return found
        if isinstance(base, (_Instance, _Class)):
            cls = base.cls if isinstance(base, _Instance) else base
            m = idx.class_member(cls, attr)
            if m is None:
                if call is not None and not self._guarded(call, attr, "AttributeError"):
                    self.report(node, "missing-attribute",
                                f"{cls.name} has no attribute '{attr}' "
                                f"({cls.module.rel}:{cls.node.lineno})")
                return None
            if isinstance(m, _Func):
                return [_BoundMethod(m, cls, isinstance(base, _Instance))]  # type: ignore
            if isinstance(base, _Instance):
                return idx.field_type(cls, attr)
            return None
        return None
