"""Discovers the patch modules under ``patches/``, validates them, and selects what applies.

Loading imports only the patch modules (plain data) and ``packaging``; never libcst.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .fast import catalog_digest
from .patch import Patch, Probe, registered
from .target import Dist, Target
from .versions import InvalidSpecifier, InvalidVersion, matches, may_overlap

__all__ = ["Catalog", "CatalogError", "Decision", "load"]


class CatalogError(Exception):
    """The catalog itself is inconsistent (duplicate ids, cycles, contradictory patches)."""


@dataclass(frozen=True)
class Decision:
    """Whether one patch applies to the target, and why (or why not)."""

    patch: Patch
    status: str  # "applicable" | "not-applicable" | "obsolete"
    reason: str


@dataclass(frozen=True)
class Catalog:
    patches: tuple[Patch, ...]  # in application order
    supported: dict[str, str]  # dist -> range the catalog was proven on
    root: Path

    def by_id(self, pid: str) -> Patch:
        return next(p for p in self.patches if p.id == pid)

    def decide(self, target: Target, dists: dict[str, Dist | None]) -> list[Decision]:
        return [_decide(p, target, dists) for p in self.patches]

    def digest(self) -> str:
        return catalog_digest(str(self.root))


def load() -> Catalog:
    import patches  # noqa: PLC0415

    root = Path(patches.__file__).parent
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
    found = [p for p in registered() if p.module in wanted]
    return Catalog(_ordered(_validated(found)), dict(getattr(patches, "SUPPORTED", {})), root)


def _validated(found: list[Patch]) -> list[Patch]:
    ids = [p.id for p in found]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise CatalogError(f"duplicate patch ids: {sorted(dupes)}")
    for p in found:
        try:
            for spec in (p.target_versions, *p.requires.values()):
                matches(spec, "0")
        except (InvalidSpecifier, InvalidVersion) as exc:
            raise CatalogError(f"{p.id}: bad version range: {exc}") from exc
        unknown = set(p.after) - set(ids)
        if unknown:
            raise CatalogError(f"{p.id}: 'after' names unknown patches {sorted(unknown)}")
    _check_conflicts(found)
    return found


def _ordered(found: list[Patch]) -> list[Patch]:
    """Topological order by ``after``, stable by id otherwise."""
    by_id = {p.id: p for p in found}
    out: list[Patch] = []
    state: dict[str, int] = {}

    def visit(p: Patch, path: tuple[str, ...]) -> None:
        if state.get(p.id) == 2:
            return
        if state.get(p.id) == 1:
            raise CatalogError(f"ordering cycle: {' -> '.join(path + (p.id,))}")
        state[p.id] = 1
        for dep in sorted(p.after):
            visit(by_id[dep], path + (p.id,))
        state[p.id] = 2
        out.append(p)

    for p in sorted(found, key=lambda p: p.id):
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


def _overlap(a: Patch, b: Patch) -> bool:
    if a.target != b.target or not may_overlap(a.target_versions, b.target_versions):
        return False
    return all(may_overlap(a.requires[d], b.requires[d]) for d in set(a.requires) & set(b.requires))


def _check_conflicts(found: list[Patch]) -> None:
    """Two patches that consume the same code in overlapping version ranges, with no order
    between them, contradict each other: which result you get would depend on chance."""
    anc = _ancestors(found)
    anchors: dict[tuple[str, str, str], list[Patch]] = {}
    for p in found:
        for e in p.edits:
            anchors.setdefault((e.file, e.scope, e.anchor), []).append(p)
    for (file, scope, _), ps in anchors.items():
        for i, a in enumerate(ps):
            for b in ps[i + 1 :]:
                if a.id != b.id and _overlap(a, b) and a.id not in anc[b.id] and b.id not in anc[a.id]:
                    raise CatalogError(
                        f"contradictory patches {a.id} and {b.id}: both edit the same code in "
                        f"{file} ({scope or 'module'}) for overlapping versions; order them with 'after'"
                    )
    dests: dict[str, str] = {}
    for p in found:
        for s in p.shims:
            if s.dest in dests and dests[s.dest] != p.id:
                other = next(q for q in found if q.id == dests[s.dest])
                if _overlap(p, other):
                    raise CatalogError(f"contradictory patches {other.id} and {p.id}: both vendor {s.dest}")
            dests[s.dest] = p.id


def probe_holds(target: Target, probe: Probe, dists: dict[str, Dist | None]) -> bool:
    if dists.get(probe.dist) is None:
        return False
    try:
        text = target.path(probe.file).read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        found = False
    else:
        found = re.search(probe.pattern, text, re.MULTILINE) is not None
    return found == probe.present


def _decide(p: Patch, target: Target, dists: dict[str, Dist | None]) -> Decision:
    owner = dists.get(p.target)
    if owner is None:
        return Decision(p, "not-applicable", f"{p.target} is not installed")
    if not matches(p.target_versions, owner.version):
        return Decision(p, "not-applicable", f"{p.target} {owner.version} not in {p.target_versions}")
    for dep, spec in p.requires.items():
        d = dists.get(dep)
        if d is None:
            return Decision(p, "not-applicable", f"{dep} is not installed")
        if not matches(spec, d.version):
            return Decision(p, "not-applicable", f"{dep} {d.version} not in {spec}")
    for probe in p.probes:
        if not probe_holds(target, probe, dists):
            word = "lacks" if probe.present else "has"
            return Decision(p, "not-applicable", f"{probe.file} {word} /{probe.pattern}/")
    if p.obsolete_if and all(probe_holds(target, q, dists) for q in p.obsolete_if):
        return Decision(p, "obsolete", "upstream already has this change")
    return Decision(p, "applicable", "")
