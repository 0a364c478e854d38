"""The vLLM side: an index of the modules under a root, found and parsed lazily and cached,
and what a name at the top level of one of them resolves to."""

from __future__ import annotations

import ast
import builtins
import hashlib
import logging
import os
import stat
import threading
from collections import OrderedDict
from pathlib import Path

from .classes import _ClassIndex
from .namespace import _Binding, _Module
from .objects import (ROOT_PACKAGE, _Class, _External, _Func, _Mod, _Obj, _Opaque,
                      _prefer_implementation)

log = logging.getLogger("vllm_compat.check")

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


class _Index(_ClassIndex):
    """The modules of one root folder, found and parsed on demand (class queries: :mod:`.classes`)."""

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
