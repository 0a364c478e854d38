"""What a vLLM class has: its bases, a linearised MRO, its members and field types."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .objects import _Class, _External, _Func, _Instance, _is_vllm, _Obj, _Opaque
from .syntax import (_attr_targets, _decorator_name, _iter_body, _plain_annotation, _target_names,
                     _unwrap_optional)

if TYPE_CHECKING:
    from .namespace import _Module

_TRIVIAL_BASES = {
    "builtins.object", "abc.ABC", "typing.Generic", "typing.Protocol",
    "typing_extensions.Protocol", "typing_extensions.Generic",
}


class _ClassIndex:
    """The class queries of :class:`.index._Index` (names are resolved by its
    ``eval_in_module``)."""

    def eval_in_module(self, mod: _Module, expr: ast.AST, seen: frozenset = frozenset()
                       ) -> list[_Obj]:
        raise NotImplementedError

    def bases(self, cls: _Class) -> list[_Obj]:
        out: list[_Obj] = []
        for b in cls.node.bases:
            found = [f for f in self.eval_in_module(cls.module, b)
                     if not (isinstance(f, _Class) and f.node is cls.node)]  # class X(X)
            if len(found) == 1:
                out.append(found[0])
            elif not found:
                out.append(_Opaque(ast.unparse(b)))
            else:
                out.append(next((f for f in found if isinstance(f, _Class)), found[0]))
        if not out:
            out.append(_External("builtins.object"))
        return out

    def mro(self, cls: _Class) -> list[_Obj]:
        """A left-to-right depth-first linearisation (first occurrence wins); externals kept."""
        out: list[_Obj] = []
        seen: set = set()

        def visit(c: _Obj, depth: int) -> None:
            key = (c.module.name, c.node.name, c.node.lineno) if isinstance(c, _Class) else c
            if key in seen or depth > 50:
                return
            seen.add(key)
            out.append(c)
            if isinstance(c, _Class):
                for b in self.bases(c):
                    visit(b, depth + 1)

        visit(cls, 0)
        # object/ABC/Generic last, as in a real MRO
        trivial = [c for c in out if isinstance(c, _External) and c.qualname in _TRIVIAL_BASES]
        return [c for c in out if c not in trivial] + trivial

    def class_member(self, cls: _Class, attr: str) -> _Obj | None:
        """``attr`` on the class or its bases: ``_Func`` for a def, ``_Opaque`` for other
        attributes or when unknowable, ``None`` when certainly missing."""
        unknowable = False
        for c in self.mro(cls):
            if isinstance(c, _Class):
                found = _class_body_member(c, attr)
                if isinstance(found, ast.AST):
                    return _Func(c.module, found, cls)
                if found:
                    return _Opaque("attribute")
                if _class_body_member(c, "__getattr__") or _class_body_member(
                        c, "__getattribute__"):
                    unknowable = True
            elif isinstance(c, _External):
                if c.qualname in _TRIVIAL_BASES:
                    if attr in vars(object) or (
                            c.qualname == "abc.ABC" and attr in dir(__import__("abc").ABC)):
                        return _Opaque("object attribute")
                    continue
                unknowable = True
            else:
                unknowable = True
        return _Opaque("unknowable") if unknowable else None

    def field_type(self, cls: _Class, attr: str) -> list[_Obj] | None:
        """The vLLM class a class-level annotation ``attr: SomeConfig`` declares, as instances
        (``VllmConfig.cache_config`` -> ``CacheConfig``); None when unknown."""
        for c in self.mro(cls):
            if not isinstance(c, _Class):
                continue
            for st in _iter_body(c.node.body):
                if (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                        and st.target.id == attr):
                    ann = _unwrap_optional(st.annotation)
                    if ann is None or not _plain_annotation(ann):
                        return None
                    found = self.eval_in_module(c.module, ann)
                    if found and all(isinstance(x, _Class) and _is_vllm(x.module.name)
                                     for x in found):
                        return [_Instance(x) for x in found]  # type: ignore[arg-type]
                    return None
        return None


def _class_members(node: ast.ClassDef) -> dict[str, object]:
    """name -> def node (functions) or True (any other attribute) for one class body,
    including ``self.x = ...`` assignments made in its methods."""
    cached = getattr(node, "_vllm_compat_members", None)
    if cached is not None:
        return cached
    out: dict[str, object] = {}
    defs: dict[str, list] = {}
    for st in _iter_body(node.body):
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs.setdefault(st.name, []).append(st)
        elif isinstance(st, ast.ClassDef):
            out[st.name] = True
        elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            for t in targets:
                for n in _target_names(t):
                    out.setdefault(n, True)
    for name, nodes in defs.items():
        impl = [n for n in nodes if not any(_decorator_name(d) == "overload"
                                            for d in n.decorator_list)]
        chosen = (impl or nodes)
        if len(chosen) == 1 and not any(_decorator_name(d) in ("property", "cached_property")
                                        or (isinstance(d, ast.Attribute) and d.attr in (
                                            "setter", "getter", "deleter"))
                                        for d in chosen[0].decorator_list):
            out[name] = chosen[0]
        else:
            out[name] = True
    # instance attributes assigned in methods
    for nodes in defs.values():
        for fn in nodes:
            if not fn.args.args:
                continue
            self_name = fn.args.args[0].arg
            for sub in ast.walk(fn):
                tgts: list = []
                if isinstance(sub, ast.Assign):
                    tgts = sub.targets
                elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                    tgts = [sub.target]
                for t in tgts:
                    for a in _attr_targets(t):
                        if isinstance(a.value, ast.Name) and a.value.id == self_name:
                            out.setdefault(a.attr, True)
    node._vllm_compat_members = out  # type: ignore[attr-defined]
    return out


def _class_body_member(c: _Class, attr: str) -> object:
    return _class_members(c.node).get(attr)
