"""What a name resolves to: a module, function, class or instance found in the index, or
something outside it (external) or unknowable (opaque)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from .syntax import _decorator_name

if TYPE_CHECKING:
    from .namespace import _Module

ROOT_PACKAGE = "vllm"


# Resolved objects -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Mod:
    module: _Module


@dataclass(frozen=True)
class _Func:
    module: _Module
    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: "_Class | None" = None  # the class a method was found on


@dataclass(frozen=True)
class _Class:
    module: _Module
    node: ast.ClassDef

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class _Instance:
    cls: _Class


@dataclass(frozen=True)
class _External:
    qualname: str  # e.g. "pydantic.BaseModel", "builtins.object"


@dataclass(frozen=True)
class _Opaque:
    why: str = ""


_Obj = Union[_Mod, _Func, _Class, _Instance, _External, _Opaque]


@dataclass(frozen=True)
class _BoundMethod:
    func: _Func
    cls: _Class
    bound: bool  # called on an instance (self is supplied)


def _prefer_implementation(objs: list[_Obj]) -> list[_Obj]:
    """A function bound several times: its ``@overload`` stubs give way to the implementation."""
    funcs = [o for o in objs if isinstance(o, _Func)]
    if len(funcs) > 1:
        impl = [f for f in funcs if not any(_decorator_name(d) == "overload"
                                            for d in f.node.decorator_list)]
        if impl:
            return [o for o in objs if not isinstance(o, _Func)] + impl
    return objs


def _is_vllm(name: str) -> bool:
    return name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + ".")


def _is_vllm_def(o: object) -> bool:
    """A function, class or method defined in vLLM (what calls are bound against)."""
    if isinstance(o, (_Func, _Class)):
        return _is_vllm(o.module.name)
    if isinstance(o, _BoundMethod):
        return _is_vllm(o.cls.module.name)
    return False


def _key(o: _Obj) -> object:
    if isinstance(o, _Instance):
        return ("i", o.cls.module.name, o.cls.node.name, o.cls.node.lineno)
    return repr(o)
