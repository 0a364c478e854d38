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

Where each part lives: :mod:`.index` (the modules of a vLLM tree and what their top-level
names are, with :mod:`.namespace` for one module's bindings and :mod:`.classes` for a class's
bases and members), :mod:`.binding` (signatures of defs and of generated ``__init__`` methods, and
binding a call to them), :mod:`.scopes` and :mod:`.walker` (one checked file, its imports in
:mod:`.imports`, local types in :mod:`.inference`, calls and attribute reads in
:mod:`.calls`), :mod:`.report` (the findings).
"""

from __future__ import annotations

import ast
from pathlib import Path

from .index import _LOCK, _index_for, clear_cache
from .namespace import _Module
from .objects import ROOT_PACKAGE, _is_vllm
from .report import CheckReport, Finding
from .walker import _FileChecker

__all__ = ["CheckReport", "Finding", "check_sources", "clear_cache"]


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
    notes: list[str] = []
    checked = skipped = 0
    index.overlay = overlay
    try:
        for path, source in files.items():
            modname, is_pkg = names[path]
            fc = _FileChecker(path, source, index, modname, is_pkg, local)
            fc.run()
            findings.extend(fc.findings)
            notes.extend(fc.notes)
            checked += fc.calls_checked
            skipped += fc.calls_skipped
    finally:
        index.overlay = {}
    findings.sort(key=lambda f: (f.file, f.line, f.kind, f.message))
    return CheckReport(tuple(findings), len(files), checked, skipped, tuple(sorted(files)), tuple(notes))
