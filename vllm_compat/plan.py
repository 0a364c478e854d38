"""What the full path knows about a site: the catalogs in use and their decisions, each
file's state, and the bytes each managed file should have (shared by the commands).

Never imports libcst, except :func:`transformed` (apply, diff, record).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .catalog.patch import todo_fields
from .report import CommandError, Exit, Report
from .state import (
    APPLIED, DRIFTED, NOT_APPLICABLE, OBSOLETE, PENDING, STALE,
    FileState, PatchState, changed_dists, file_state,
)
from .store import Manifest, Store
from .target import Dist, Target, sha256_bytes

__all__ = ["Plan", "load_catalog", "make_plan", "read", "transformed"]


@dataclass
class Plan:
    """Everything the slow path knows: the catalogs' decisions and each file's state."""

    target: Target
    store: Store
    catalog: object  # vllm_compat.catalog.loader.Catalog
    dists: dict[str, Dist | None]
    decisions: list
    manifest: Manifest | None
    report: Report
    expected: dict[str, tuple[str, ...]]  # file -> ids of applicable patches editing it, in order
    pristine_copies: dict[str, bytes] = field(default_factory=dict)  # proven elsewhere (record's wheels)
    proof: dict | None = None  # the on-machine proof that admits these versions (apply checks its bytes)
    done: dict[tuple[str, tuple[str, ...]], tuple[bytes, bytes]] = field(default_factory=dict)  # prefetch()

    def owner(self, rel: str) -> str:
        if self.manifest and rel in self.manifest.files:
            return self.manifest.files[rel].dist
        return next(p.target for p in self.catalog.patches if rel in p.files)

    def is_shim(self, rel: str) -> bool:
        return any(s.dest == rel for p in self.catalog.patches for s in p.shims)

    def shim_source(self, rel: str) -> bytes:
        pid, shim = next((p.id, s) for p in self.catalog.patches for s in p.shims if s.dest == rel)
        return self.catalog.shim_path(pid, shim.source).read_bytes()

    def pristine(self, rel: str, state: FileState) -> bytes:
        """The wheel's original bytes of ``rel``, proven against RECORD."""
        dist = self.dists.get(self.owner(rel))
        want = dist.record.get(rel) if dist else None
        if want is None:
            raise CommandError(f"{rel} is not in its distribution's RECORD: cannot prove a pristine copy", Exit.ENV)
        for data in (read(self.target, rel), self.store.backup(rel), self.pristine_copies.get(rel)):
            if data is not None and sha256_bytes(data) == want:
                return data
        raise CommandError(f"no pristine copy of {rel} matches RECORD ({state.state}: {state.detail})", Exit.DRIFTED)

    def applicable(self, ids: tuple[str, ...] | None = None) -> list:
        return [d.patch for d in self.decisions if d.status == "applicable" and (ids is None or d.patch.id in ids)]

    def expected_bytes(self, fs: FileState, pristine: bytes | None = None) -> bytes | None:
        """What ``fs.path`` should contain now (``None``: a shim no patch wants any more)."""
        if self.is_shim(fs.path):
            return self.shim_source(fs.path) if fs.patches else None
        pristine = self.pristine(fs.path, fs) if pristine is None else pristine
        if not fs.patches:
            return pristine
        hit = self.done.get((fs.path, fs.patches))
        if hit is not None and hit[0] == pristine:
            return hit[1]
        return transformed(fs.path, pristine, self.applicable(fs.patches))

    def prefetch(self, states: list[FileState]) -> None:
        """Transform the patched files among ``states`` at once, in parallel where that pays
        (:mod:`.parallel`); :meth:`expected_bytes` then returns the results."""
        todo = [fs for fs in states if fs.patches and not self.is_shim(fs.path)]
        if len(todo) < 2:
            return
        work = [(fs.path, self.pristine(fs.path, fs), self.applicable(fs.patches)) for fs in todo]
        out = _transform_all(work)
        for fs, (rel, pristine, _) in zip(todo, work):
            self.done[rel, fs.patches] = (pristine, out[rel])


def load_catalog(target: Target, missing_ok: tuple[str, ...] = ()):
    """Every catalog in use for ``target``, loaded and validated together."""
    from .catalog.loader import CatalogError, load  # noqa: PLC0415 - slow path only
    from .catalog.sources import SourceError, discover  # noqa: PLC0415

    try:
        sources, entry_points = discover(str(target.site), target.catalogs, exact=True, missing_ok=missing_ok)
        return load(sources, entry_points)
    except SourceError as exc:
        raise CommandError(f"catalog error: {exc}", Exit.CATALOG if exc.invalid else Exit.CATALOG_LOAD) from exc
    except CatalogError as exc:
        raise CommandError(f"catalog error: {exc}", Exit.CATALOG_LOAD if exc.load_error else Exit.CATALOG) from exc


def _packages(catalog) -> set[str]:
    """Every distribution the catalogs look at (by import package)."""
    pkgs = set(catalog.supported) | set(catalog.checked)
    for p in catalog.patches:
        pkgs |= {p.target, *p.requires, *(q.dist for q in p.probes + p.obsolete_if)}
    for a in catalog.advisories:
        pkgs |= {*a.when, *(q.dist for q in a.probes)}
    return pkgs


def _unsupported(catalog, dists: dict[str, Dist | None]) -> tuple[str, ...]:
    from .catalog.versions import matches  # noqa: PLC0415

    out = []
    targets_present = any(dists.get(p.target) is not None for p in catalog.patches)
    for pkg, specs in catalog.supported.items():
        d = dists.get(pkg)
        if d is not None and not any(matches(spec, d.version) for spec in specs):
            out.append(f"{pkg} {d.version} is outside the proven range {' or '.join(specs)}")
        elif d is None and targets_present and any(pkg in p.requires for p in catalog.patches):
            # Patches react to this dependency's version: without it they cannot be decided, and
            # "nothing applies" would make verify pass vacuously (e.g. a `pip install --target`
            # folder holding speculators while vLLM lives in the environment).
            out.append(f"{pkg} is not installed in this site-packages, so the patches that depend on it "
                       f"cannot be decided: manage the environment that holds both")
    return tuple(out)


_OUTSIDE = "is outside the proven range"


def _catalog_change(manifest: Manifest | None, combined: str, parts: dict) -> str:
    """Why the manifest's digest differs from the catalogs in use now ("" where it does not)."""
    if manifest is None or manifest.catalog == combined:
        return ""
    old = manifest.digests
    if not old:
        return "the catalog or vllm-compat changed since apply"
    what = ["vllm-compat's engine (patch.py, transform) changed"] if old.get("engine") != parts["engine"] else []
    before, now = old.get("catalogs", {}), parts["catalogs"]
    what += [f"catalog {n} is new" for n in now if n not in before]
    what += [f"catalog {n} is no longer in use" for n in before if n not in now]
    what += [f"catalog {n} changed" for n in now if n in before and before[n] != now[n]]
    return "; ".join(what or ["the order of the catalogs changed"]) + " since apply"


def make_plan(target: Target, catalog=None, pristine_copies: dict[str, bytes] | None = None) -> Plan:
    """The plan of ``target`` with the catalogs in use (or ``catalog``, e.g. with record's new patch)."""
    catalog = catalog if catalog is not None else load_catalog(target)
    store = Store(target)
    manifest = store.manifest()
    hints = manifest.dists if manifest else {}
    # (and what the manifest names: a catalog no longer in use patched them, revert restores them)
    pkgs = _packages(catalog) | set(hints) | {r.dist for r in (manifest.files.values() if manifest else ())}
    dists = {pkg: target.find(pkg, hints.get(pkg, {}).get("dist_info")) for pkg in sorted(pkgs)}
    notes = [f"{pkg} is not installed in this site-packages: no patch has a file to edit"
             for pkg in sorted({p.target for p in catalog.patches}) if dists.get(pkg) is None]
    notes += [f"{p.id}: {', '.join(todo_fields(p))} still TODO ({p.module})" for p in catalog.patches if todo_fields(p)]
    decisions = catalog.decide(target, dists)
    changed = _catalog_change(manifest, *catalog.digests())
    stale = changed_dists(manifest, dists) if manifest else {}
    expected: dict[str, list[str]] = {}
    for d in decisions:
        if d.status == "applicable":
            for rel in d.patch.files:
                expected.setdefault(rel, []).append(d.patch.id)
    plan = Plan(target, store, catalog, dists, decisions, manifest, Report(str(target.site), {}, (), ()),
                {k: tuple(v) for k, v in expected.items()}, dict(pristine_copies or {}))
    fstates = []
    for rel in sorted(set(expected) | set(manifest.files if manifest else ())):
        dist = dists.get(plan.owner(rel))
        pristine = None if plan.is_shim(rel) else (dist.record.get(rel) if dist else None)
        fstates.append(file_state(target, rel, pristine, plan.expected.get(rel, ()), manifest,
                                  "; ".join(stale.values()), changed))
    if store.has_journal():  # a run killed after its commit point, not hand edits
        fstates = [FileState(f.path, PENDING, f.patches, "interrupted run: the next apply or revert completes it")
                   if f.state == DRIFTED else f for f in fstates]
    by_file = {f.path: f for f in fstates}
    pstates = []
    for d in decisions:
        if d.status != "applicable":
            pstates.append(PatchState(d.patch.id, d.patch.title, NOT_APPLICABLE if d.status == "not-applicable" else OBSOLETE, d.reason))
            continue
        states = {by_file[rel].state for rel in d.patch.files}
        state = next((s for s in (STALE, DRIFTED, PENDING) if s in states), APPLIED)
        pstates.append(PatchState(d.patch.id, d.patch.title, state, "", d.patch.files))
    unsupported = _unsupported(catalog, dists)
    if unsupported and all(_OUTSIDE in u for u in unsupported):
        unsupported, plan.proof, note = _proven(plan, unsupported, fstates)
        notes += note
    plan.report = Report(str(target.site), {k: v.version for k, v in dists.items() if v}, tuple(pstates),
                         tuple(fstates), unsupported, notes=tuple(notes),
                         advisories=tuple(catalog.advise(target, dists)))
    return plan


def bound_now(plan: Plan, fstates) -> tuple[dict, dict[str, str | None]]:
    """What a proof of this site binds now (:func:`.proof.binding`), and each bound file's
    wheel hash (``None`` for shims)."""
    from .proof import binding  # noqa: PLC0415
    from .target import sha256_file  # noqa: PLC0415

    files = [f.path for f in fstates if f.patches]
    pristine = {rel: None if plan.is_shim(rel) else (plan.dists[plan.owner(rel)].record.get(rel)
                                                     if plan.dists.get(plan.owner(rel)) else None) for rel in files}
    dists = {pkg: (d.version, d.record_digest) for pkg, d in plan.dists.items() if d is not None}
    return binding(plan.catalog.digests()[0], dists, {rel: sha256_file(plan.target.path(rel)) for rel in files}), pristine


def _proven(plan: Plan, unsupported: tuple[str, ...], fstates) -> tuple[tuple[str, ...], dict | None, list[str]]:
    """Versions outside the shipped range, admitted by a valid proof made on this machine."""
    from .proof import ProofError, accept, load  # noqa: PLC0415

    try:
        proof = load(str(plan.target.state_dir))
    except ProofError as exc:
        return tuple(f"{u} (proof refused: {exc})" for u in unsupported), None, []
    if proof is None:
        return unsupported, None, []
    ok, why = accept(proof, *bound_now(plan, fstates))
    if not ok:
        return tuple(f"{u} (the proof of {proof['date']} no longer holds: {why})" for u in unsupported), None, []
    return (), proof, [f"{u}: proven on this machine, {proof['date']} (vllm-compat prove)" for u in unsupported]


def read(target: Target, rel: str) -> bytes | None:
    try:
        return target.path(rel).read_bytes()
    except FileNotFoundError:
        return None


def transformed(rel: str, pristine: bytes, patches: list) -> bytes:
    """``rel``'s pristine bytes with ``patches`` (in catalog order) applied."""
    return _transform_all([(rel, pristine, patches)])[rel]


def _transform_all(work: list) -> dict[str, bytes]:
    from .parallel import transform_files  # noqa: PLC0415 - libcst
    from .transform import TransformError  # noqa: PLC0415

    try:
        return transform_files(work)
    except TransformError as exc:
        raise CommandError(str(exc), Exit.TARGET) from exc
