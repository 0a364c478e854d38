"""Signatures and binding: a def's parameters, the ``__init__`` that ``@dataclass``, vLLM's
``@config``, pydantic and ``msgspec.Struct`` generate from the fields, and binding a call's
arguments to either exactly as Python would."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from .classes import _TRIVIAL_BASES, _class_body_member
from .objects import _Class, _External, _Obj
from .syntax import _annotation_head, _decorator_name

if TYPE_CHECKING:
    from .index import _Index

_STRUCT_BASES = {"msgspec.Struct"}
_BASEMODEL_BASES = {"pydantic.BaseModel", "pydantic.main.BaseModel"}
_NAMEDTUPLE_BASES = {"typing.NamedTuple", "typing_extensions.NamedTuple"}


def init_signature(index: _Index, cls: _Class) -> _Sig | None:
    """The signature ``cls(...)`` binds to, or None when it cannot be known."""
    mro = index.mro(cls)
    for c in mro:
        if isinstance(c, _Class):
            if _class_body_member(c, "__new__") and not _is_dataclass_like(c):
                return None
            init = _class_body_member(c, "__init__")
            if isinstance(init, ast.AST):
                return _Sig.from_def(init, f"{cls.name}(...)", c.module.rel, drop_first=True)
            if init:
                return None
            if _is_dataclass_like(c):
                return _fields_signature(cls, mro, "dataclass")
            if _has_metaclass(c):
                return None
        elif isinstance(c, _External):
            if c.qualname in _STRUCT_BASES:
                return _fields_signature(cls, mro, "struct")
            if c.qualname in _BASEMODEL_BASES:
                return _fields_signature(cls, mro, "basemodel")
            if c.qualname in _NAMEDTUPLE_BASES:
                return _fields_signature(cls, mro, "namedtuple")
            if c.qualname in _TRIVIAL_BASES:
                continue
            return None
        else:
            return None
    where = f"{cls.module.rel}:{cls.node.lineno}"
    return _Sig([], f"{cls.name}(...)", where, note="no __init__")


def _fields_signature(cls: _Class, mro: list[_Obj], style: str) -> _Sig:
    params: dict[str, _Param] = {}
    kw_only_all = style == "basemodel"
    var_kw = False
    classes = [c for c in mro if isinstance(c, _Class)]
    if style == "dataclass":
        classes = [c for c in classes if _is_dataclass_like(c)]
    for c in reversed(classes):
        kw_only = kw_only_all or _decorator_kw_only(c) or _class_kw(c, "kw_only")
        for name, param in _class_fields(c, kw_only):
            if name in params:
                old = params[name]
                params[name] = _Param(name, old.kind, param.has_default)
            else:
                params[name] = param
        if style == "basemodel" and _basemodel_allows_extra(c):
            var_kw = True
    if style == "basemodel" and not any(_basemodel_forbids(c) for c in classes):
        var_kw = True
    ordered = [p for p in params.values() if p.kind == "pk"] + [
        p for p in params.values() if p.kind == "kw"]
    if var_kw:
        ordered.append(_Param("data", "varkw", False))
    where = f"{cls.module.rel}:{cls.node.lineno}"
    return _Sig(ordered, f"{cls.name}(...)", where, note=style)


def _is_dataclass_like(c: _Class) -> bool:
    """Decorated so that ``__init__`` is generated from the fields (``@dataclass``, vLLM's
    ``@config``, pydantic's ``@dataclass``; not ``@dataclass(init=False)``)."""
    for d in c.node.decorator_list:
        if _decorator_name(d) in ("dataclass", "config", "pydantic_dataclass"):
            if isinstance(d, ast.Call) and any(
                    k.arg == "init" and isinstance(k.value, ast.Constant)
                    and k.value.value is False for k in d.keywords):
                continue
            return True
    return False


def _has_metaclass(c: _Class) -> bool:
    return any(k.arg == "metaclass" and not (
        isinstance(k.value, ast.Name) and k.value.id == "ABCMeta") for k in c.node.keywords)


def _decorator_kw_only(c: _Class) -> bool:
    for d in c.node.decorator_list:
        if isinstance(d, ast.Call) and _decorator_name(d) == "dataclass":
            for k in d.keywords:
                if k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value:
                    return True
    return False


def _class_kw(c: _Class, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value
               for k in c.node.keywords)


def _model_config_extra(c: _Class) -> str | None:
    for st in c.node.body:
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if any(isinstance(t, ast.Name) and t.id == "model_config" for t in targets):
                v = st.value
                if isinstance(v, ast.Call):
                    for k in v.keywords:
                        if k.arg == "extra" and isinstance(k.value, ast.Constant):
                            return str(k.value.value)
                if isinstance(v, ast.Dict):
                    for k, val in zip(v.keys, v.values):
                        if isinstance(k, ast.Constant) and k.value == "extra" and isinstance(
                                val, ast.Constant):
                            return str(val.value)
    for k in c.node.keywords:
        if k.arg == "extra" and isinstance(k.value, ast.Constant):
            return str(k.value.value)
    return None


def _basemodel_forbids(c: _Class) -> bool:
    return _model_config_extra(c) == "forbid"


def _basemodel_allows_extra(c: _Class) -> bool:
    return _model_config_extra(c) in ("allow", "ignore")


def _class_fields(c: _Class, kw_only: bool) -> Iterator[tuple[str, "_Param"]]:
    for st in c.node.body:  # fields are direct statements of the class body
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        name = st.target.id
        head = _annotation_head(st.annotation)
        if head == "ClassVar" or (name.startswith("__") and name.endswith("__")):
            continue
        if head == "KW_ONLY":
            kw_only = True
            continue
        has_default = st.value is not None
        v = st.value
        if isinstance(v, ast.Call) and _decorator_name(v.func) in ("field", "Field", "PrivateAttr"):
            if _decorator_name(v.func) == "PrivateAttr":
                continue
            kws = {k.arg: k.value for k in v.keywords if k.arg}
            init = kws.get("init")
            if isinstance(init, ast.Constant) and init.value is False:
                continue
            has_default = "default" in kws or "default_factory" in kws
            if not has_default and v.args and not (
                    isinstance(v.args[0], ast.Constant) and v.args[0].value is Ellipsis):
                has_default = True  # pydantic Field(<default>, ...)
            if isinstance(kws.get("default"), ast.Constant) and kws["default"].value is Ellipsis:
                has_default = False
            k = kws.get("kw_only")
            if isinstance(k, ast.Constant):
                yield name, _Param(name, "kw" if k.value else "pk", has_default)
                continue
        yield name, _Param(name, "kw" if kw_only else "pk", has_default)


@dataclass(frozen=True)
class _Param:
    name: str
    kind: str  # "po" positional-only, "pk" positional-or-keyword, "varpos", "kw", "varkw"
    has_default: bool


@dataclass
class _Sig:
    params: list[_Param]
    label: str  # "Scheduler(...)" / "MultiprocExecutor.sample_tokens(...)"
    where: str  # "vllm/v1/core/sched/scheduler.py:60"
    note: str = ""

    @staticmethod
    def from_def(fn: ast.FunctionDef | ast.AsyncFunctionDef, label: str, rel: str,
                 drop_first: bool) -> "_Sig":
        a = fn.args
        params: list[_Param] = []
        posonly = list(a.posonlyargs)
        regular = list(a.args)
        ndef = len(a.defaults)
        positional = posonly + regular
        first_default = len(positional) - ndef
        for i, p in enumerate(positional):
            kind = "po" if i < len(posonly) else "pk"
            params.append(_Param(p.arg, kind, i >= first_default))
        if a.vararg:
            params.append(_Param(a.vararg.arg, "varpos", True))
        for p, d in zip(a.kwonlyargs, a.kw_defaults):
            params.append(_Param(p.arg, "kw", d is not None))
        if a.kwarg:
            params.append(_Param(a.kwarg.arg, "varkw", True))
        if drop_first and params and params[0].kind in ("po", "pk"):
            params = params[1:]
        return _Sig(params, label, f"{rel}:{fn.lineno}")

    def bind(self, npos: int, keywords: list[str]) -> list[str]:
        """Problems binding ``npos`` positional arguments and ``keywords`` (as Python does)."""
        problems: list[str] = []
        positional = [p for p in self.params if p.kind in ("po", "pk")]
        has_varpos = any(p.kind == "varpos" for p in self.params)
        has_varkw = any(p.kind == "varkw" for p in self.params)
        filled: set[str] = set()
        if npos > len(positional) and not has_varpos:
            problems.append(f"takes {len(positional)} positional argument"
                            f"{'' if len(positional) == 1 else 's'} but {npos} were given")
        for p in positional[:npos]:
            filled.add(p.name)
        by_name = {p.name: p for p in self.params if p.kind in ("pk", "kw")}
        for k in keywords:
            p = by_name.get(k)
            if p is None:
                if not has_varkw:
                    problems.append(f"unexpected keyword argument '{k}'")
            elif k in filled:
                problems.append(f"multiple values for argument '{k}'")
            else:
                filled.add(k)
        for p in self.params:
            if p.kind in ("po", "pk", "kw") and not p.has_default and p.name not in filled:
                problems.append(f"missing required argument '{p.name}'")
        return problems
