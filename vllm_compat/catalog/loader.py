"""Loads the catalogs in use (:mod:`.catalogs` says which), validates them together, and
selects what applies.

Loading imports only the patch modules (plain data) and ``packaging``; never libcst.  The
built-in catalog is the ``patches`` package; a user catalog's folder is imported as a
package of its own (its modules may import each other relatively), re-read on every load.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import advisory as advisories
from .advisory import CONDITIONS, Advisory
from .decide import AdvisoryMatch, Decision, advised, decide, probe_holds  # noqa: F401 (probe_holds: API)
from .patch import Patch, forget, registered
from .sources import BUILTIN, Source, builtin_root, digest
from ..target import Dist, Target
from .versions import InvalidSpecifier, InvalidVersion, matches, may_overlap

__all__ = ["AdvisoryMatch", "Catalog", "CatalogError", "Decision", "load"]


class CatalogError(Exception):
    """The catalogs are inconsistent (duplicate ids, cycles, contradictory patches, paths that
    leave the target package); ``load_error``: one cannot be read (a module fails to import)."""

    def __init__(self, message: str, load_error: bool = False) -> None:
        super().__init__(message)
        self.load_error = load_error


@dataclass(frozen=True)
class Catalog:
    patches: tuple[Patch, ...]  # in application order
    supported: dict[str, tuple[str, ...]]  # dist -> ranges the catalogs were proven on (any may admit)
    root: Path  # the built-in catalog's folder
    sources: tuple[Source, ...] = ()
    origin: dict[str, Source] = field(default_factory=dict)  # patch or advisory id -> its catalog
    entry_points: dict = field(default_factory=dict)  # the entry-point scan (cached in the manifest)
    advisories: tuple[Advisory, ...] = ()
    checked: dict[str, str] = field(default_factory=dict)  # package bound to vLLM -> why `check` reads it

    def advise(self, target: Target, dists: dict[str, Dist | None]) -> list[AdvisoryMatch]:
        """The advisories whose ranges and probes hold for what is installed."""
        return [m for a in self.advisories if (m := advised(a, target, dists)) is not None]

    def by_id(self, pid: str) -> Patch:
        return next(p for p in self.patches if p.id == pid)

    def decide(self, target: Target, dists: dict[str, Dist | None]) -> list[Decision]:
        return [decide(p, target, dists) for p in self.patches]

    def digest(self) -> str:
        return self.digests()[0]

    def digests(self) -> tuple[str, dict]:
        return digest(list(self.sources))

    def shim_path(self, pid: str, source: str) -> Path:
        return Path(self.origin[pid].root) / "shims" / source

    def where(self, pid: str) -> str:
        return self.origin[pid].describe() if pid in self.origin else "the built-in catalog"

    def qualified(self, patches: list[Patch], source: Source, module: str) -> list[Patch]:
        """``patches`` of a module of ``source`` with the ids they would have if loaded."""
        local = {p.id.split(":", 1)[1]: p.id for p in self.patches if self.origin.get(p.id) is source}
        local |= {p.id: f"{source.name}:{p.id}" for p in patches}
        return [_qualified_after(replace(p, id=f"{source.name}:{p.id}", module=module), source, {source.name: local})
                for p in patches]

    def extended(self, patches: list[Patch], source: Source) -> Catalog:
        """This catalog with ``patches`` (qualified ids) of ``source`` added, validated again."""
        sources = self.sources if any(s.name == source.name for s in self.sources) else (*self.sources, source)
        origin = {**self.origin, **{p.id: source for p in patches}}
        rank = {s.name: i for i, s in enumerate(sources)}
        found = [*self.patches, *patches]
        return replace(self, patches=tuple(_ordered(_validated(found, origin), {p.id: rank[origin[p.id].name] for p in found})),
                       sources=sources, origin=origin)


def load(sources: list[Source] | None = None, entry_points: dict | None = None) -> Catalog:
    """The patches of ``sources`` (default: the built-in catalog alone), validated together
    and in application order; raises :class:`CatalogError`."""
    sources = sources or [Source(BUILTIN, builtin_root(), "vllm-compat")]
    found: list[Patch] = []
    origin: dict[str, Source] = {}
    supported: dict[str, tuple[str, ...]] = {}
    checked: dict[str, str] = {}
    advised: list[Advisory] = []
    local: dict[str, dict[str, str]] = {}
    for rank, src in enumerate(sources):
        patches, sup, adv, chk = _load_builtin() if src.name == BUILTIN else _load_user(src, rank)
        for pkg, spec in sup.items():  # a range, or several (any admits)
            supported[pkg] = (*supported.get(pkg, ()), *((spec,) if isinstance(spec, str) else tuple(spec)))
        checked.update({str(k): str(v) for k, v in chk.items()})
        for a in adv:
            if src.name != BUILTIN:
                a = replace(a, id=f"{src.name}:{a.id}")
            origin[a.id] = src
            advised.append(a)
        local[src.name] = {}
        for p in patches:
            if src.name != BUILTIN:
                if ":" in p.id or not p.id:
                    raise CatalogError(f"{src.describe()}: bad patch id {p.id!r} (ids are qualified with the catalog's name)")
                local[src.name][p.id] = f"{src.name}:{p.id}"
                p = replace(p, id=f"{src.name}:{p.id}")
            first = next((q for q in found if q.id == p.id), None)
            if first is not None:
                raise CatalogError(f"duplicate patch ids: {p.id!r} is registered by {first.module} and {p.module} "
                                   f"({src.describe()})")
            origin[p.id] = src
            found.append(p)
    found = [_qualified_after(p, origin[p.id], local) for p in found]
    rank = {s.name: i for i, s in enumerate(sources)}
    ordered = _ordered(_validated(found, origin), {p.id: rank[origin[p.id].name] for p in found})
    _validated_advisories(advised, {p.id for p in found}, origin)
    return Catalog(tuple(ordered), supported, Path(sources[0].root), tuple(sources), origin, entry_points or {},
                   tuple(advised), checked)


def _validated_advisories(advised: list[Advisory], patch_ids: set[str], origin: dict[str, Source]) -> None:
    seen: set[str] = set()
    for a in advised:
        who = f"{a.id} ({origin[a.id].describe()})"
        if a.id in seen or a.id in patch_ids:
            raise CatalogError(f"duplicate ids: advisory {who} has the id of another patch or advisory")
        seen.add(a.id)
        if not a.when:
            raise CatalogError(f"advisory {who} names no distribution and range ('when')")
        if a.condition and a.condition not in CONDITIONS:
            raise CatalogError(f"advisory {who}: unknown condition {a.condition!r} (known: {', '.join(CONDITIONS)})")
        try:
            for spec in a.when.values():
                matches(spec, "0")
        except (InvalidSpecifier, InvalidVersion) as exc:
            raise CatalogError(f"advisory {who}: bad version range: {exc}") from exc


def _load_builtin() -> tuple[list[Patch], dict, list[Advisory], dict]:
    # The built-in catalog is data to the engine, found by its folder and loaded by module name
    # as user catalogs are: the engine never imports it statically (its modules import the engine).
    from .sources import builtin_root  # noqa: PLC0415

    patches = importlib.import_module("patches")
    root = Path(builtin_root())
    modules = []
    for sub in sorted(os.listdir(root)):
        pkg = root / sub
        if sub.startswith(("_", ".")) or sub == "shims" or not (pkg / "__init__.py").is_file():
            continue
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py") and not name.startswith("_"):
                modules.append(f"patches.{sub}.{name[:-3]}")
                importlib.import_module(modules[-1])
    # Only what the modules on disk now registered (a module imported earlier in this process
    # registered then, and is not imported again).
    wanted = set(modules)
    return ([p for p in registered() if p.module in wanted], dict(getattr(patches, "SUPPORTED", {})),
            [a for a in advisories.registered() if a.module in wanted], dict(getattr(patches, "CHECKED", {})))


def _user_modules(root: Path) -> list[str]:
    """Dotted names (below the catalog's package) of its patch modules: ``*.py`` at the top and
    one folder down, except ``_*`` files and the ``shims`` folder."""
    out = []
    for name in sorted(os.listdir(root)):
        path = root / name
        if name.endswith(".py") and not name.startswith("_") and path.is_file():
            out.append(name[:-3])
        elif path.is_dir() and name.isidentifier() and not name.startswith("_") and name != "shims":
            out += [f"{name}.{m[:-3]}" for m in sorted(os.listdir(path))
                    if m.endswith(".py") and not m.startswith("_") and m[:-3].isidentifier()]
    return [m for m in out if all(part.isidentifier() for part in m.split("."))]


def _load_user(src: Source, rank: int) -> tuple[list[Patch], dict, list[Advisory], dict]:
    if not os.path.isdir(src.root):
        return [], {}, [], {}  # the folder `record` is about to create
    package = f"_vllm_compat_catalog_{rank}"
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    forget(package)
    advisories.forget(package)
    root = Path(src.root)
    init = root / "__init__.py"
    if init.is_file():
        spec = importlib.util.spec_from_file_location(package, init, submodule_search_locations=[str(root)])
    else:  # a plain folder of modules: a package without an __init__
        spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
        spec.submodule_search_locations = [str(root)]
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[package] = module
    names = _user_modules(root)
    quiet, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the user's folder
    try:
        for name in ([""] if init.is_file() else []) + names:
            try:
                if name:
                    importlib.import_module(f"{package}.{name}")
                else:
                    spec.loader.exec_module(module)  # type: ignore[union-attr]
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of user code is a load error
                shown = root / (name.replace(".", "/") + ".py" if name else "__init__.py")
                raise CatalogError(f"{src.describe()}: {shown} does not import: {type(exc).__name__}: {exc}",
                                   load_error=True) from None
    finally:
        sys.dont_write_bytecode = quiet
    wanted = {f"{package}.{n}" for n in names}
    def named(x):  # named by its file in messages
        return replace(x, module=str(root / (x.module[len(package) + 1 :].replace(".", "/") + ".py")))

    return ([named(p) for p in registered() if p.module in wanted], dict(getattr(module, "SUPPORTED", {})),
            [named(a) for a in advisories.registered() if a.module in wanted], dict(getattr(module, "CHECKED", {})))


def _qualified_after(p: Patch, src: Source, local: dict[str, dict[str, str]]) -> Patch:
    """``after`` names as loaded ids: ``NAME:ID`` as written, a bare id of the patch's own
    catalog, else of the built-in catalog."""
    if src.name == BUILTIN:
        return p
    out = tuple(a if ":" in a else local[src.name].get(a, a) for a in p.after)
    return replace(p, after=out) if out != p.after else p


def _validated(found: list[Patch], origin: dict[str, Source] | None = None) -> list[Patch]:
    origin = origin or {}

    def who(p: Patch) -> str:
        return f"{p.id} ({origin[p.id].describe()})" if p.id in origin else p.id

    ids = [p.id for p in found]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise CatalogError(f"duplicate patch ids: {sorted(dupes)}")
    for p in found:
        try:
            for spec in (p.target_versions, *p.requires.values()):
                matches(spec, "0")
        except (InvalidSpecifier, InvalidVersion) as exc:
            raise CatalogError(f"{who(p)}: bad version range: {exc}") from exc
        unknown = set(p.after) - set(ids)
        if unknown:
            raise CatalogError(f"{who(p)}: 'after' names unknown patches {sorted(unknown)}")
        _check_paths(p, who(p), Path(origin[p.id].root) if p.id in origin else None)
    _check_conflicts(found, who)
    return found


def _check_paths(p: Patch, who: str, root: Path | None) -> None:
    """A patch writes only inside its target package, and vendors only shims of its catalog."""
    for rel in p.files:
        parts = rel.split("/")
        if not rel or os.path.isabs(rel) or "\\" in rel or ".." in parts or "" in parts or \
                not (parts[0] == p.target or rel == f"{p.target}.py"):
            raise CatalogError(f"{who} writes {rel!r}, outside its target package {p.target!r} in site-packages")
    for shim in p.shims:
        if root is not None and ("/" in shim.source or "\\" in shim.source or shim.source.startswith(".")
                                 or not (root / "shims" / shim.source).is_file()):
            raise CatalogError(f"{who}: shim source {shim.source!r} is not a file in {root / 'shims'}")


def _ordered(found: list[Patch], rank: dict[str, int] | None = None) -> list[Patch]:
    """Topological order by ``after``; otherwise by catalog (the built-in one first, then the
    user catalogs in the order they are named), then by id."""
    rank = rank or {}
    by_id = {p.id: p for p in found}
    out: list[Patch] = []
    state: dict[str, int] = {}

    def key(p: Patch) -> tuple[int, str]:
        return rank.get(p.id, 0), p.id

    def visit(p: Patch, path: tuple[str, ...]) -> None:
        if state.get(p.id) == 2:
            return
        if state.get(p.id) == 1:
            raise CatalogError(f"ordering cycle: {' -> '.join(path + (p.id,))}")
        state[p.id] = 1
        for dep in sorted((by_id[d] for d in p.after), key=key):
            visit(dep, path + (p.id,))
        state[p.id] = 2
        out.append(p)

    for p in sorted(found, key=key):
        visit(p, ())
    return out


def _ancestors(found: list[Patch]) -> dict[str, set[str]]:
    by_id = {p.id: p for p in found}
    memo: dict[str, set[str]] = {}

    def anc(pid: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if pid not in memo:
            out: set[str] = set()
            for dep in by_id[pid].after:
                if dep not in seen:
                    out |= {dep} | anc(dep, seen | {pid})
            memo[pid] = out
        return memo[pid]

    return {p.id: anc(p.id) for p in found}


def overlap(a: Patch, b: Patch) -> bool:
    """Whether some installed versions would select both ``a`` and ``b``."""
    if a.target != b.target or not may_overlap(a.target_versions, b.target_versions):
        return False
    return all(may_overlap(a.requires[d], b.requires[d]) for d in set(a.requires) & set(b.requires))


def _check_conflicts(found: list[Patch], who=lambda p: p.id) -> None:
    """Two patches that consume the same code in overlapping version ranges, with no order
    between them, contradict each other: which result you get would depend on chance (within
    one catalog or across two; ``who`` names a patch with its catalog)."""
    anc = _ancestors(found)
    anchors: dict[tuple[str, str, str], list[Patch]] = {}
    for p in found:
        for e in p.edits:
            anchors.setdefault((e.file, e.scope, e.anchor), []).append(p)
    for (file, scope, _), ps in anchors.items():
        for i, a in enumerate(ps):
            for b in ps[i + 1 :]:
                if a.id != b.id and overlap(a, b) and a.id not in anc[b.id] and b.id not in anc[a.id]:
                    raise CatalogError(
                        f"contradictory patches {who(a)} and {who(b)}: both edit the same code in "
                        f"{file} ({scope or 'module'}) for overlapping versions; order them with 'after'"
                    )
    dests: dict[str, str] = {}
    for p in found:
        for s in p.shims:
            if s.dest in dests and dests[s.dest] != p.id:
                other = next(q for q in found if q.id == dests[s.dest])
                if overlap(p, other):
                    raise CatalogError(f"contradictory patches {who(other)} and {who(p)}: both vendor {s.dest}")
            dests[s.dest] = p.id
