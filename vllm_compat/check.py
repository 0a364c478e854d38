"""The static proof: do these Python files still fit the vLLM that is installed?

:func:`check_sources` reads the given sources and the vLLM *sources* under a site-packages
folder with the standard library's :mod:`ast` only -- it never imports vLLM, torch, libcst or
speculators -- and proves, for every use of vLLM in the files:

* **imports resolve**: ``import vllm.x`` / ``from vllm.x import Y`` name a module that exists
  and a ``Y`` that is a submodule or is bound at the top level of that module (def, class,
  assignment, import or re-export, ``from m import *``, ``__all__``); a module-level
  ``__getattr__`` counts as resolving.  Imports inside ``try: ... except ImportError:`` form a
  fallback chain that is fine when at least one branch resolves completely.
* **calls bind**: every call of a vLLM function or class imported into the file binds to its
  signature (positional count, missing required parameters, unexpected keywords) exactly as
  Python would bind it.  Classes are followed through their bases across vLLM modules; classes
  whose ``__init__`` is generated (``@dataclass``, vLLM's ``@config``, pydantic dataclasses and
  ``BaseModel``, ``msgspec.Struct``, ``NamedTuple``) get the signature made from their fields.
* **methods exist**: a method called on a vLLM object whose type is known locally
  (``x = VllmClass(...)``, ``self.attr = VllmClass(...)``, parameters annotated with a vLLM
  class, results of vLLM functions/methods whose return annotation names a vLLM class) must be
  defined on the class or its vLLM bases, and binds to its signature where its ``def`` is found.
  Types also flow through class-level field annotations (``VllmConfig.cache_config`` is a
  ``CacheConfig``) and the checked file's own return annotations.  Attributes *read* from such
  objects must exist too (a field, property, method, or ``self.x = ...`` in one of its methods).

The checked files' own package (``speculators``) is followed as well: names imported from a
vendored shim (``from speculators._vllm_compat_kv import get_kv_cache_config_from_groups``) are
bound to the vLLM definitions the shim re-exports, and an import of a name the package does
not have is reported.  The given sources take the place of the files on disk.  Nothing
outside vLLM and that package is read (torch, transformers, ... are never parsed).

Deliberately not checked (counted in ``calls_skipped`` where they are calls): calls using
``*args`` / ``**kwargs`` unpacking, methods named by strings (``collective_rpc("name")``),
calls guarded by ``hasattr(obj, "name")`` or by ``try: ... except TypeError/AttributeError``,
and lines carrying the pragma ``# vllm-compat: ignore``.  When the answer is not knowable
statically (a base class outside vLLM such as ``torch.nn.Module`` or an ``Enum``, a class with
``__getattr__``), nothing is reported.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import logging
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Union

__all__ = ["CheckReport", "Finding", "check_sources", "clear_cache"]

log = logging.getLogger(__name__)

PRAGMA = "vllm-compat: ignore"
ROOT_PACKAGE = "vllm"


@dataclass(frozen=True)
class Finding:
    file: str  # path as given
    line: int
    kind: str  # "unresolved-import" | "bad-call" | "missing-attribute" | "syntax-error"
    message: str


@dataclass(frozen=True)
class CheckReport:
    findings: tuple[Finding, ...]
    files_checked: int
    calls_checked: int  # vLLM calls bound to a signature (so a vacuous pass is visible)
    calls_skipped: int = 0  # vLLM calls seen but not bound (unpacking, guards, unknown targets)

    @property
    def ok(self) -> bool:
        return not self.findings


# ---------------------------------------------------------------------------------------------
# The vLLM side: an index of modules under a root, parsed lazily and cached.
# ---------------------------------------------------------------------------------------------

_TRIVIAL_BASES = {
    "builtins.object", "abc.ABC", "typing.Generic", "typing.Protocol",
    "typing_extensions.Protocol", "typing_extensions.Generic",
}
_STRUCT_BASES = {"msgspec.Struct"}
_BASEMODEL_BASES = {"pydantic.BaseModel", "pydantic.main.BaseModel"}
_NAMEDTUPLE_BASES = {"typing.NamedTuple", "typing_extensions.NamedTuple"}
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


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

_PARSE_CACHE: "OrderedDict[str, ast.Module | None]" = OrderedDict()
_PARSE_CACHE_MAX = 256  # parsed modules kept (a cell needs ~40; bounded memory)
_INDEXES: "OrderedDict[str, _Index]" = OrderedDict()
_INDEXES_MAX = 4
_LOCK = threading.RLock()  # the caches and an index's overlay are shared state


def clear_cache() -> None:
    """Forget every parsed module (tests use this; the cache is otherwise bounded)."""
    with _LOCK:
        _PARSE_CACHE.clear()
        _INDEXES.clear()


def _parse_cached(source: bytes, filename: str) -> ast.Module | None:
    key = hashlib.sha1(source).hexdigest()
    if key in _PARSE_CACHE:
        _PARSE_CACHE.move_to_end(key)
        return _PARSE_CACHE[key]
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        log.warning("cannot parse %s", filename)
        tree = None
    _PARSE_CACHE[key] = tree
    if len(_PARSE_CACHE) > _PARSE_CACHE_MAX:
        _PARSE_CACHE.popitem(last=False)
    return tree


class _Index:
    """The modules of one root folder, found and parsed on demand."""

    def __init__(self, root: Path):
        self.root = root
        # name -> (generation last verified, location signature, module); a cached module is
        # re-validated by a few stat() calls once per check_sources() call, so a site whose
        # files changed between calls (apply, upgrade) is never judged from stale sources.
        self.modules: dict[str, tuple[int, tuple | None, _Module | None]] = {}
        self.generation = 0
        self.overlay: dict[str, _Module] = {}  # the files being checked, by module name

    def module(self, name: str) -> _Module | None:
        if name in self.overlay:
            return self.overlay[name]
        hit = self.modules.get(name)
        if hit is not None and hit[0] == self.generation:
            return hit[2]
        loc = self._locate(name)
        if hit is not None and hit[1] == loc:
            self.modules[name] = (self.generation, loc, hit[2])
            return hit[2]
        mod = self._build(name, loc)
        self.modules[name] = (self.generation, loc, mod)
        return mod

    def _locate(self, name: str) -> tuple | None:
        parts = name.split(".")
        if not all(p.isidentifier() for p in parts):
            return None
        if len(parts) > 1 and self.module(".".join(parts[:-1])) is None:
            return None
        base = self.root.joinpath(*parts)
        for kind, path in (("pkg", base / "__init__.py"), ("py", base.with_name(parts[-1] + ".py"))):
            try:
                st = path.stat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                return (kind, str(path), st.st_mtime_ns, st.st_size)
        if base.parent.is_dir():
            for p in base.parent.glob(parts[-1] + ".*"):
                if p.suffix in (".so", ".pyd") and p.name.split(".")[0] == parts[-1]:
                    return ("ext", str(p), 0, 0)
        if base.is_dir():  # a namespace package
            return ("ns", str(base), 0, 0)
        return None

    def _build(self, name: str, loc: tuple | None) -> _Module | None:
        if loc is None:
            return None
        kind, path = loc[0], Path(loc[1])
        rel = path.relative_to(self.root).as_posix()
        if kind == "ext":
            return _Module(name, path, False, None, rel)
        if kind == "ns":
            return _Module(name, None, True, None, rel)
        tree = _parse_cached(path.read_bytes(), str(path))
        m = _Module(name, path, kind == "pkg", tree if tree is not None else ast.Module([], []),
                    rel)
        if tree is None:
            m.opaque = True
        return m

    # --- resolution -----------------------------------------------------------------------

    def lookup(self, mod: _Module, name: str, seen: frozenset = frozenset()) -> list[_Obj]:
        """What ``name`` is at the top level of ``mod`` (``[]``: not bound there)."""
        key = (mod.name, name)
        if key in seen:
            return [_Opaque("import cycle")]
        seen = seen | {key}
        if mod.opaque:
            return [_Opaque("extension module")]
        out: list[_Obj] = []
        for b in mod.bindings.get(name, ()):
            out.extend(self._resolve_binding(mod, b, seen))
        if out:
            return _prefer_implementation(out)
        for src in mod.stars:
            smod = self.module(src)
            if smod is None:
                if not src.startswith(ROOT_PACKAGE + ".") and src != ROOT_PACKAGE:
                    return [_Opaque(f"star import from {src}")]
                continue
            if smod.all_names is not None and not smod.all_dynamic:
                if name not in smod.all_names:
                    continue
            elif name.startswith("_"):
                continue
            found = self.lookup(smod, name, seen)
            if found:
                return found
        if mod.is_pkg:
            sub = self.module(f"{mod.name}.{name}")
            if sub is not None:
                return [_Mod(sub)]
        if mod.has_getattr:
            return [_Opaque("module __getattr__")]
        if mod.all_names and name in mod.all_names:
            return [_Opaque("listed in __all__")]
        return []

    def _resolve_binding(self, mod: _Module, b: _Binding, seen: frozenset) -> list[_Obj]:
        if b.kind == "def":
            return [_Func(mod, b.node)]
        if b.kind == "class":
            return [_Class(mod, b.node)]
        if b.kind == "module":
            m = self.module(b.module)
            return [_Mod(m)] if m is not None else [_External(b.module)]
        if b.kind == "from":
            src = self.module(b.module)
            if src is None:
                return [_External(f"{b.module}.{b.name}")]
            found = self.lookup(src, b.name, seen)
            return found or [_Opaque(f"{b.module}.{b.name} unresolved")]
        if b.kind == "alias":
            found = self.eval_in_module(mod, b.node, seen)
            return found or [_Opaque("alias")]
        return [_Opaque("value")]

    def eval_in_module(self, mod: _Module, expr: ast.AST, seen: frozenset = frozenset()
                       ) -> list[_Obj]:
        """Evaluate a name / attribute chain / subscript base in ``mod``'s namespace."""
        if isinstance(expr, ast.Subscript):
            return self.eval_in_module(mod, expr.value, seen)
        if isinstance(expr, ast.Name):
            found = self.lookup(mod, expr.id, seen)
            if not found and hasattr(builtins, expr.id):
                return [_External(f"builtins.{expr.id}")]
            return found
        if isinstance(expr, ast.Attribute):
            out: list[_Obj] = []
            for base in self.eval_in_module(mod, expr.value, seen):
                out.extend(self.getattr(base, expr.attr, seen))
            return out
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            try:
                inner = ast.parse(expr.value, mode="eval").body
            except SyntaxError:
                return []
            return self.eval_in_module(mod, inner, seen)
        return []

    def getattr(self, base: _Obj, attr: str, seen: frozenset = frozenset()) -> list[_Obj]:
        if isinstance(base, _Mod):
            return self.lookup(base.module, attr, seen) or (
                [] if base.module.name.split(".")[0] == ROOT_PACKAGE else [_Opaque()])
        if isinstance(base, _External):
            return [_External(f"{base.qualname}.{attr}")]
        if isinstance(base, _Class):
            m = self.class_member(base, attr)
            return [m] if m is not None else [_Opaque()]
        return [_Opaque()]

    # --- classes --------------------------------------------------------------------------

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

    def init_signature(self, cls: _Class) -> "_Sig | None":
        """The signature ``cls(...)`` binds to, or None when it cannot be known."""
        mro = self.mro(cls)
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
                    return self._fields_signature(cls, mro, "dataclass")
                if _has_metaclass(c):
                    return None
            elif isinstance(c, _External):
                if c.qualname in _STRUCT_BASES:
                    return self._fields_signature(cls, mro, "struct")
                if c.qualname in _BASEMODEL_BASES:
                    return self._fields_signature(cls, mro, "basemodel")
                if c.qualname in _NAMEDTUPLE_BASES:
                    return self._fields_signature(cls, mro, "namedtuple")
                if c.qualname in _TRIVIAL_BASES:
                    continue
                return None
            else:
                return None
        where = f"{cls.module.rel}:{cls.node.lineno}"
        return _Sig([], f"{cls.name}(...)", where, note="no __init__")

    def _fields_signature(self, cls: _Class, mro: list[_Obj], style: str) -> "_Sig":
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


def _decorator_name(d: ast.expr) -> str:
    if isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Name):
        return d.id
    if isinstance(d, ast.Attribute):
        return d.attr
    return ""


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


def _attr_targets(t: ast.AST) -> Iterator[ast.Attribute]:
    if isinstance(t, ast.Attribute):
        yield t
    elif isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _attr_targets(e)


def _class_body_member(c: _Class, attr: str) -> object:
    return _class_members(c.node).get(attr)


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


def _index_for(root: Path) -> _Index:
    key = os.path.realpath(root)
    idx = _INDEXES.get(key)
    if idx is None:
        idx = _Index(Path(key))
        _INDEXES[key] = idx
        if len(_INDEXES) > _INDEXES_MAX:
            _INDEXES.popitem(last=False)
    else:
        _INDEXES.move_to_end(key)
    return idx


# ---------------------------------------------------------------------------------------------
# The checked side: one file.
# ---------------------------------------------------------------------------------------------

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


def _is_vllm(name: str) -> bool:
    return name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + ".")


def _is_vllm_def(o: object) -> bool:
    """A function, class or method defined in vLLM (what calls are bound against)."""
    if isinstance(o, (_Func, _Class)):
        return _is_vllm(o.module.name)
    if isinstance(o, _BoundMethod):
        return _is_vllm(o.cls.module.name)
    return False


class _FileChecker:
    def __init__(self, path: str, source: str, index: _Index, modname: str = "",
                 is_pkg: bool = False, local_packages: frozenset = frozenset()):
        self.path = path
        self.modname = modname
        self.is_pkg = is_pkg
        self.local_packages = local_packages
        self.source = source
        self.index = index
        self.findings: list[Finding] = []
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

    # --- imports --------------------------------------------------------------------------

    def _block_imports(self, stmts: list[ast.stmt], scope: _Scope
                       ) -> tuple[list[tuple], list[tuple[str, list[_Obj] | None]]]:
        failures: list[tuple] = []
        bindings: list[tuple[str, list[_Obj] | None]] = []
        for st in stmts:
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                f, b = self._import(st, scope)
                failures += f
                bindings += b
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            elif isinstance(st, ast.ClassDef):
                f, b = self._block_imports(st.body, scope)
                failures += f
                bindings += b
            elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
                guarded = [h for h in st.handlers if _catches(h, _IMPORT_ERRORS)]
                bf, bb = self._block_imports(st.body, scope)
                if guarded and bf:
                    chosen = None
                    alt_failures: list[tuple] = []
                    for h in guarded:
                        hf, hb = self._block_imports(h.body, scope)
                        if not hf:
                            chosen = hb
                            break
                        alt_failures += hf
                    if chosen is not None:
                        bindings += [b for b in bb if b[1] is not None] + chosen
                    else:
                        failures += bf + alt_failures
                        bindings += bb
                else:
                    failures += bf
                    bindings += bb
                    for h in st.handlers:
                        if h in guarded:
                            continue  # not executed when the body imports fine
                        hf, hb = self._block_imports(h.body, scope)
                        failures += hf
                        bindings += hb
                for part in (st.orelse, st.finalbody):
                    f, b = self._block_imports(part, scope)
                    failures += f
                    bindings += b
            elif isinstance(st, ast.If):
                if _is_type_checking(st.test):
                    f, b = self._block_imports(st.orelse, scope)
                    failures += f
                    bindings += b
                    continue
                bf, bb = self._block_imports(st.body, scope)
                ef, eb = self._block_imports(st.orelse, scope)
                if st.orelse and bb and eb and (not bf or not ef):
                    # alternatives: one branch resolving completely is enough
                    bindings += (bb if not bf else eb) + [
                        x for x in (eb if not bf else bb) if x[1] is not None]
                else:
                    failures += bf + ef
                    bindings += bb + eb
            elif isinstance(st, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                f, b = self._block_imports(st.body + list(getattr(st, "orelse", [])), scope)
                failures += f
                bindings += b
            elif type(st).__name__ == "Match":
                for case in st.cases:  # type: ignore[attr-defined]
                    f, b = self._block_imports(case.body, scope)
                    failures += f
                    bindings += b
        return failures, bindings

    def _is_local(self, name: str) -> bool:
        """A module of the package the checked files belong to (``speculators``): imports
        from it are resolved too, so a vLLM name re-exported by a vendored shim is still
        bound at its call sites, and a name the shim lacks is reported."""
        top = name.split(".")[0]
        return top in self.local_packages and self.index.module(top) is not None

    def _absolute(self, st: ast.ImportFrom) -> str:
        if not st.level:
            return st.module or ""
        if not self.modname:
            return ""
        base = self.modname if self.is_pkg else self.modname.rpartition(".")[0]
        for _ in range(st.level - 1):
            base = base.rpartition(".")[0]
        if not base:
            return ""
        return f"{base}.{st.module}" if st.module else base

    def _import(self, st: ast.Import | ast.ImportFrom, scope: _Scope
                ) -> tuple[list[tuple], list[tuple[str, list[_Obj] | None]]]:
        failures: list[tuple] = []
        bindings: list[tuple[str, list[_Obj] | None]] = []
        idx = self.index
        if isinstance(st, ast.Import):
            for a in st.names:
                if not (_is_vllm(a.name) or self._is_local(a.name)):
                    continue
                mod = idx.module(a.name)
                top = a.name.split(".")[0]
                if mod is None:
                    failures.append((st, "unresolved-import", _no_module(a.name)))
                    bindings.append((a.asname or top, None))
                elif a.asname:
                    bindings.append((a.asname, [_Mod(mod)]))
                else:
                    topmod = idx.module(top)
                    bindings.append((top, [_Mod(topmod)] if topmod else None))
            return failures, bindings
        absolute = self._absolute(st)
        vllm = _is_vllm(absolute)
        if not absolute or not (vllm or self._is_local(absolute)):
            return failures, bindings
        mod = idx.module(absolute)
        if mod is None:
            failures.append((st, "unresolved-import", _no_module(absolute)))
            for a in st.names:
                bindings.append((a.asname or a.name, None))
            return failures, bindings
        for a in st.names:
            if a.name == "*":
                continue
            found = idx.lookup(mod, a.name)
            if not found:
                extra = " (bound only under TYPE_CHECKING)" if a.name in mod.type_only else ""
                failures.append((st, "unresolved-import",
                                 f"cannot import name '{a.name}' from '{absolute}' "
                                 f"({mod.rel}){extra}"))
                bindings.append((a.asname or a.name, None))
            elif vllm:
                bindings.append((a.asname or a.name, found))
            else:  # from the checked package: only what leads into vLLM matters
                keep = [o for o in found if isinstance(o, _Mod) or _is_vllm_def(o)]
                bindings.append((a.asname or a.name, keep or [_Opaque("local")]))
        return failures, bindings

    # --- types ----------------------------------------------------------------------------

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
            return self.index.init_signature(c)
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


def _key(o: _Obj) -> object:
    if isinstance(o, _Instance):
        return ("i", o.cls.module.name, o.cls.node.name, o.cls.node.lineno)
    return repr(o)


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


def _no_module(name: str) -> str:
    return f"No module named '{name}'"


def _module_name(path: str, root: Path) -> tuple[str, bool]:
    """``speculators/_vllm_compat_kv.py`` -> ``("speculators._vllm_compat_kv", False)``."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(root)
        except ValueError:
            return "", False
    parts = list(p.with_suffix("").parts) if p.suffix == ".py" else []
    is_pkg = bool(parts) and parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    if not parts or not all(x.isidentifier() for x in parts):
        return "", False
    return ".".join(parts), is_pkg


def check_sources(files: dict[str, str], vllm_root: Path) -> CheckReport:
    """Check ``files`` ({display path: source}) against the vLLM sources under ``vllm_root``
    (a site-packages folder holding the ``vllm`` package).

    Display paths relative to the site (``speculators/data_generation/x.py``) also name the
    files' modules: imports between the checked files and from their package are followed,
    with the given sources taking the place of what is on disk.  Raises FileNotFoundError
    when there is no ``vllm`` package under ``vllm_root``.
    """
    with _LOCK:
        return _check_sources(files, Path(vllm_root))


def _check_sources(files: dict[str, str], vllm_root: Path) -> CheckReport:
    index = _index_for(vllm_root)
    index.generation += 1
    if index.module(ROOT_PACKAGE) is None:
        raise FileNotFoundError(f"no '{ROOT_PACKAGE}' package under {vllm_root}")
    names = {path: _module_name(path, index.root) for path in files}
    overlay: dict[str, _Module] = {}
    for path, source in files.items():
        modname, is_pkg = names[path]
        if not modname or _is_vllm(modname):
            continue
        try:
            tree = ast.parse(source, filename=path)
        except SyntaxError:
            continue
        overlay[modname] = _Module(modname, Path(path), is_pkg, tree, path)
    local = frozenset(m.split(".")[0] for m in overlay)
    findings: list[Finding] = []
    checked = skipped = 0
    index.overlay = overlay
    try:
        for path, source in files.items():
            modname, is_pkg = names[path]
            fc = _FileChecker(path, source, index, modname, is_pkg, local)
            fc.run()
            findings.extend(fc.findings)
            checked += fc.calls_checked
            skipped += fc.calls_skipped
    finally:
        index.overlay = {}
    findings.sort(key=lambda f: (f.file, f.line, f.kind, f.message))
    return CheckReport(tuple(findings), len(files), checked, skipped)
