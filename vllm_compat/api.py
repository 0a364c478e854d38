"""The commands as functions: each takes a :class:`Target` and returns a frozen result.

No printing and no ``sys.exit`` here: the CLI, the vLLM plugin and the runner's preflight all
call these and render or act on the results themselves.  ``status`` and ``verify`` never import
libcst (``verify`` on an up-to-date site does not even load the catalog).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import IntEnum

from .state import (
    APPLIED, DRIFTED, NOT_APPLICABLE, OBSOLETE, PENDING, STALE,
    FileState, PatchState, changed_dists, dist_snapshot, file_state,
)
from .store import FileRecord, Manifest, Store
from .target import Dist, Target, TargetError, sha256_bytes, sha256_file

__all__ = [
    "ApplyResult", "CommandError", "Exit", "Report", "RevertResult", "StripFileResult", "TargetError",
    "apply", "check", "diff", "expected_content", "revert", "status", "strip_debug", "verify",
]

log = logging.getLogger(__name__)


class Exit(IntEnum):
    """Process exit codes (also listed in the README and ``--help``)."""

    OK = 0
    USAGE = 2  # bad command line
    ENV = 3  # target missing, unreadable, not writable, corrupt state
    TARGET = 4  # a target file does not parse, or a patch's anchor is missing
    PENDING = 10  # applicable patches not applied (or the catalog changed)
    DRIFTED = 11  # managed files were edited by hand (revert refuses without --force)
    STALE = 12  # a patched distribution or a dependency was reinstalled/upgraded since apply
    UNSUPPORTED = 13  # installed version no patch covers and not known-good
    CHECK = 14  # `check` found calls that do not bind to the installed vLLM
    CATALOG = 15  # the catalog itself is inconsistent


class CommandError(Exception):
    """A command could not run; ``code`` is the exit code it maps to."""

    def __init__(self, message: str, code: Exit) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Report:
    site: str
    versions: dict[str, str]  # package -> installed version
    patches: tuple[PatchState, ...]
    files: tuple[FileState, ...]
    unsupported: tuple[str, ...] = ()
    fast: bool = False  # answered from the manifest alone
    notes: tuple[str, ...] = ()  # facts worth a line that change no exit code

    @property
    def code(self) -> Exit:
        states = {f.state for f in self.files} | {p.state for p in self.patches}
        if self.unsupported:
            return Exit.UNSUPPORTED
        for state, code in ((DRIFTED, Exit.DRIFTED), (STALE, Exit.STALE), (PENDING, Exit.PENDING)):
            if state in states:
                return code
        return Exit.OK

    def to_dict(self) -> dict:
        return {
            "site": self.site, "versions": self.versions, "exit_code": int(self.code),
            "result": self.code.name.lower(), "unsupported": list(self.unsupported), "notes": list(self.notes),
            "patches": [vars(p) | {"files": list(p.files)} for p in self.patches],
            "files": [vars(f) | {"patches": list(f.patches)} for f in self.files],
        }


@dataclass(frozen=True)
class ApplyResult:
    report: Report  # the state before the run
    written: tuple[str, ...]
    diffs: dict[str, str] = field(default_factory=dict)  # dry runs only
    dry_run: bool = False
    nothing_to_do: bool = False  # the state was already complete: not a byte was written


@dataclass(frozen=True)
class RevertResult:
    restored: tuple[str, ...]
    removed: tuple[str, ...]


# -- shared plumbing --------------------------------------------------------------------

@dataclass
class _Plan:
    """Everything the slow path knows: the catalog's decisions and each file's state."""

    target: Target
    store: Store
    catalog: object
    dists: dict[str, Dist | None]
    decisions: list
    manifest: Manifest | None
    report: Report
    expected: dict[str, tuple[str, ...]]  # file -> ids of applicable patches editing it, in order


def _packages(catalog) -> set[str]:
    pkgs = set(catalog.supported)
    for p in catalog.patches:
        pkgs |= {p.target, *p.requires, *(q.dist for q in p.probes + p.obsolete_if)}
    return pkgs


def _unsupported(catalog, dists: dict[str, Dist | None]) -> tuple[str, ...]:
    from .versions import matches  # noqa: PLC0415

    out = []
    targets_present = any(dists.get(p.target) is not None for p in catalog.patches)
    for pkg, spec in catalog.supported.items():
        d = dists.get(pkg)
        if d is not None and not matches(spec, d.version):
            out.append(f"{pkg} {d.version} is outside the proven range {spec}")
        elif d is None and targets_present and any(pkg in p.requires for p in catalog.patches):
            # Patches react to this dependency's version: without it they cannot be decided, and
            # "nothing applies" would make verify pass vacuously (e.g. a `pip install --target`
            # folder holding speculators while vLLM lives in the environment).
            out.append(f"{pkg} is not installed in this site-packages, so the patches that depend on it "
                       f"cannot be decided: manage the environment that holds both")
    return tuple(out)


def _plan(target: Target) -> _Plan:
    from .catalog import CatalogError, load  # noqa: PLC0415 - slow path only

    try:
        catalog = load()
    except CatalogError as exc:
        raise CommandError(f"catalog error: {exc}", Exit.CATALOG) from exc
    store = Store(target)
    manifest = store.manifest()
    hints = manifest.dists if manifest else {}
    dists = {pkg: target.find(pkg, hints.get(pkg, {}).get("dist_info")) for pkg in sorted(_packages(catalog))}
    notes = tuple(f"{pkg} is not installed in this site-packages: no patch has a file to edit"
                  for pkg in sorted({p.target for p in catalog.patches}) if dists.get(pkg) is None)
    decisions = catalog.decide(target, dists)
    digest = catalog.digest()
    stale = changed_dists(manifest, dists) if manifest else {}
    expected: dict[str, list[str]] = {}
    for d in decisions:
        if d.status == "applicable":
            for rel in d.patch.files:
                expected.setdefault(rel, []).append(d.patch.id)
    files = sorted(set(expected) | set(manifest.files if manifest else ()))
    fstates = []
    for rel in files:
        pkg = _owner(catalog, rel, manifest)
        dist = dists.get(pkg)
        pristine = None if _is_shim(catalog, rel) else (dist.record.get(rel) if dist else None)
        reason = "; ".join(stale.values())
        fstates.append(file_state(target, rel, pristine, tuple(expected.get(rel, ())), manifest, reason, digest))
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
    report = Report(str(target.site), {k: v.version for k, v in dists.items() if v}, tuple(pstates),
                    tuple(fstates), _unsupported(catalog, dists), notes=notes)
    return _Plan(target, store, catalog, dists, decisions, manifest, report,
                 {k: tuple(v) for k, v in expected.items()})


def _owner(catalog, rel: str, manifest: Manifest | None) -> str:
    if manifest and rel in manifest.files:
        return manifest.files[rel].dist
    return next(p.target for p in catalog.patches if rel in p.files)


def _is_shim(catalog, rel: str) -> bool:
    return any(s.dest == rel for p in catalog.patches for s in p.shims)


def _read(target: Target, rel: str) -> bytes | None:
    try:
        return target.path(rel).read_bytes()
    except FileNotFoundError:
        return None


# -- status / verify ----------------------------------------------------------------------

def status(target: Target) -> Report:
    """Every patch's and managed file's state (slow path; never imports libcst)."""
    return _plan(target).report


def _fast_verify(target: Target) -> Report | None:
    """Answer from the manifest and hashes alone when everything is as apply left it."""
    from .fast import verified  # noqa: PLC0415

    manifest = verified(str(target.site))
    if manifest is None:
        return None
    files = tuple(FileState(rel, APPLIED, tuple(rec["patches"])) for rel, rec in manifest["files"].items())
    patches = tuple(PatchState(pid, "", APPLIED) for pid in manifest["patches"])
    patches += tuple(PatchState(pid, "", OBSOLETE) for pid in manifest["obsolete"])
    versions = {pkg: snap["version"] for pkg, snap in manifest["dists"].items()}
    return Report(str(target.site), versions, patches, files, fast=True)


def verify(target: Target) -> Report:
    """Exit code 0 only when every applicable patch is applied and every managed file matches."""
    fast = _fast_verify(target)
    if fast is not None:
        return fast
    plan = _plan(target)
    missing = sorted({p.target for p in plan.catalog.patches} - {k for k, d in plan.dists.items() if d})
    if missing and plan.manifest is None:  # nothing patched and nothing to patch: not "ok"
        raise CommandError(f"{', '.join(missing)} is not installed in {target.site}: nothing to verify", Exit.ENV)
    return plan.report


# -- apply ---------------------------------------------------------------------------------

def _shim_source(catalog, rel: str) -> bytes:
    shim = next(s for p in catalog.patches for s in p.shims if s.dest == rel)
    return (catalog.root / "shims" / shim.source).read_bytes()


def _pristine(plan: _Plan, rel: str, state: FileState) -> bytes:
    """The wheel's original bytes of ``rel``, proven against RECORD."""
    dist = plan.dists.get(_owner(plan.catalog, rel, plan.manifest))
    want = dist.record.get(rel) if dist else None
    if want is None:
        raise CommandError(f"{rel} is not in its distribution's RECORD: cannot prove a pristine copy", Exit.ENV)
    for data in (_read(plan.target, rel), plan.store.backup(rel)):
        if data is not None and sha256_bytes(data) == want:
            return data
    raise CommandError(f"no pristine copy of {rel} matches RECORD ({state.state}: {state.detail})", Exit.DRIFTED)


def apply(target: Target, dry_run: bool = False, allow_unsupported: bool = False) -> ApplyResult:
    """Bring every applicable patch to the applied state, all files or none."""
    store = Store(target)
    if dry_run:
        return _apply(_plan(target), dry_run=True, allow_unsupported=allow_unsupported)
    with store.locked():
        store.recover()
        return _apply(_plan(target), dry_run=False, allow_unsupported=allow_unsupported)


def _apply(plan: _Plan, dry_run: bool, allow_unsupported: bool) -> ApplyResult:
    report = plan.report
    if report.unsupported and not allow_unsupported:
        raise CommandError("; ".join(report.unsupported) + " (use --allow-unsupported to patch anyway)", Exit.UNSUPPORTED)
    drifted = [f for f in report.files if f.state == DRIFTED]
    if drifted:
        raise CommandError("hand-edited files (revert --force, or reinstall them): " + ", ".join(f.path for f in drifted), Exit.DRIFTED)
    if report.code == Exit.OK or (report.code == Exit.UNSUPPORTED and all(
            f.state in (APPLIED, "pristine") for f in report.files) and all(
            p.state in (APPLIED, NOT_APPLICABLE, OBSOLETE) for p in report.patches)):
        return ApplyResult(report, (), nothing_to_do=True)
    applicable = [d.patch for d in plan.decisions if d.status == "applicable"]
    writes: dict[str, bytes | None] = {}
    backups: dict[str, bytes] = {}
    new_files: dict[str, FileRecord] = {}
    for fs in report.files:
        rel = fs.path
        current = _read(plan.target, rel)
        if _is_shim(plan.catalog, rel):
            data = _shim_source(plan.catalog, rel) if fs.patches else None
            if data is not None:
                new_files[rel] = FileRecord(_owner(plan.catalog, rel, plan.manifest), None, sha256_bytes(data), list(fs.patches), shim=True)
        else:
            pristine = _pristine(plan, rel, fs)
            if fs.patches:
                data = _transformed(rel, pristine, [p for p in applicable if p.id in fs.patches])
                new_files[rel] = FileRecord(_owner(plan.catalog, rel, plan.manifest), sha256_bytes(pristine), sha256_bytes(data), list(fs.patches))
            else:
                data = pristine  # no patch wants this file any more: back to pristine
            if plan.store.backup(rel) != pristine:
                backups[rel] = pristine
        if data != current:
            writes[rel] = data
    if dry_run:
        diffs = {rel: _udiff(rel, _read(plan.target, rel), data) for rel, data in writes.items()}
        return ApplyResult(report, (), diffs, dry_run=True)
    _check_writable(plan.target, writes)
    manifest = Manifest(
        catalog=plan.catalog.digest(),
        dists={pkg: dist_snapshot(d) for pkg, d in plan.dists.items() if d is not None},
        patches=[p.id for p in applicable],
        obsolete=[d.patch.id for d in plan.decisions if d.status == "obsolete"],
        files=new_files,
    )
    plan.store.commit(writes, backups, manifest)
    log.info("patched %d file(s) in %s", len(writes), plan.target.site)
    return ApplyResult(report, tuple(sorted(writes)))


def _check_writable(target: Target, writes: dict[str, bytes | None]) -> None:
    import os  # noqa: PLC0415

    for rel in writes:
        path = target.path(rel)
        folder = path.parent if path.parent.exists() else target.site
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise CommandError(f"not writable: {path}", Exit.ENV)


def _udiff(rel: str, before: bytes | None, after: bytes | None) -> str:
    import difflib  # noqa: PLC0415 - dry runs and `diff` only

    a = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    b = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, f"a/{rel}", f"b/{rel}"))


# -- revert / diff -----------------------------------------------------------------------

def revert(target: Target, force: bool = False) -> RevertResult:
    """Back to the wheel's files (proven against RECORD); vendored shims and state removed."""
    store = Store(target)
    with store.locked():
        store.recover()
        manifest = store.manifest()
        if manifest is None:
            return RevertResult((), ())
        plan = _plan(target)
        drifted = [f.path for f in plan.report.files if f.state == DRIFTED and f.path in manifest.files]
        if drifted and not force:
            raise CommandError("refusing to revert hand-edited files (use --force to discard the edits): " + ", ".join(drifted), Exit.DRIFTED)
        writes: dict[str, bytes | None] = {}
        for rel, rec in manifest.files.items():
            current = _read(target, rel)
            if rec.shim:
                if current is not None:
                    writes[rel] = None
                continue
            dist = plan.dists.get(rec.dist)
            want = dist.record.get(rel) if dist else None
            if current is not None and sha256_bytes(current) == want:
                continue  # already pristine (e.g. reinstalled)
            backup = store.backup(rel)
            if backup is None or sha256_bytes(backup) != want:
                raise CommandError(f"no backup of {rel} matching its RECORD hash; reinstall the distribution", Exit.STALE)
            writes[rel] = backup
        _check_writable(target, writes)
        store.commit(writes, {}, None)
    return RevertResult(tuple(r for r, d in writes.items() if d is not None), tuple(r for r, d in writes.items() if d is None))


def diff(target: Target) -> dict[str, str]:
    """Unified diffs of every managed file against the wheel's pristine content."""
    plan = _plan(target)
    out = {}
    for fs in plan.report.files:
        current = _read(target, fs.path)
        if _is_shim(plan.catalog, fs.path):
            base = None
        else:
            try:
                base = _pristine(plan, fs.path, fs)
            except CommandError:
                continue
        if current != base:
            out[fs.path] = _udiff(fs.path, base, current)
    return out


def expected_content(target: Target, rel: str) -> bytes:
    """What ``rel`` should contain now: pristine plus the applicable patches (for strip-debug)."""
    plan = _plan(target)
    fs = next((f for f in plan.report.files if f.path == rel), None)
    if fs is None:
        raise CommandError(f"{rel} is not managed by vllm-compat", Exit.USAGE)
    if _is_shim(plan.catalog, rel):
        return _shim_source(plan.catalog, rel)
    pristine = _pristine(plan, rel, fs)
    if not fs.patches:
        return pristine
    applicable = [d.patch for d in plan.decisions if d.status == "applicable" and d.patch.id in fs.patches]
    return _transformed(rel, pristine, applicable)


def _transformed(rel: str, pristine: bytes, patches: list) -> bytes:
    """``rel``'s pristine bytes with ``patches`` (in catalog order) applied."""
    from .transform import TransformError, transform_file  # noqa: PLC0415 - libcst

    try:
        return transform_file(rel, pristine.decode("utf-8"), patches).encode("utf-8")
    except TransformError as exc:
        raise CommandError(str(exc), Exit.TARGET) from exc



# -- check / strip-debug -------------------------------------------------------------------

def _vllm_root(target: Target) -> str:
    if target.find("vllm") is not None:
        return str(target.site)
    own = Target.resolve()
    if own.find("vllm") is None:
        raise CommandError(f"vLLM is installed neither in {target.site} nor in {own.site}", Exit.ENV)
    return str(own.site)


def check(target: Target):
    """Statically bind the managed files' vLLM imports, calls and methods to the vLLM source
    installed beside them (:mod:`vllm_compat.check`); returns its ``CheckReport``."""
    from pathlib import Path  # noqa: PLC0415

    from .check import check_sources  # noqa: PLC0415

    plan = _plan(target)
    files = {}
    # Every file a catalog patch targets (not only those patched for this vLLM): an unpatched
    # file that calls vLLM must bind too.
    for rel in sorted({f.path for f in plan.report.files} | {r for p in plan.catalog.patches for r in p.files}):
        data = _read(target, rel)
        if data is not None:
            files[rel] = data.decode("utf-8", "replace")
    return check_sources(files, Path(_vllm_root(target)))


@dataclass(frozen=True)
class StripFileResult:
    path: str
    result: object  # vllm_compat.strip.StripResult
    diff: str
    written: bool


def strip_debug(target: Target | None, paths: list[str], dry_run: bool = False) -> list[StripFileResult]:
    """Remove added debug output: from managed files against their expected content (pristine
    plus applicable patches), or from ``paths`` outside the catalog (bare print/breakpoint/pdb)."""
    from pathlib import Path  # noqa: PLC0415

    from .store import atomic_write, drop_bytecode  # noqa: PLC0415
    from .strip import StripError, strip_debug as strip  # noqa: PLC0415

    jobs: list[tuple[str, Path, str | None]] = []
    if target is not None:
        managed = {f.path for f in status(target).files}
        wanted = paths or sorted(managed)
        for rel in wanted:
            if rel not in managed:
                raise CommandError(f"{rel} is not a file vllm-compat manages in {target.site}", Exit.USAGE)
            expected = expected_content(target, rel).decode("utf-8")
            jobs.append((rel, target.path(rel), expected))
    else:
        jobs = [(p, Path(p), None) for p in paths]
    out = []
    for shown, path, expected in jobs:
        try:
            current = path.read_bytes().decode("utf-8")  # keep CRLF bytes as they are
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}", Exit.ENV) from exc
        try:
            result = strip(current, expected)
        except StripError as exc:
            raise CommandError(f"{shown}: {exc}", Exit.TARGET) from exc
        diff = _udiff(shown, current.encode(), result.source.encode()) if result.changed else ""
        out.append(StripFileResult(shown, result, diff, False))
    if dry_run or not any(r.result.changed for r in out):
        return out
    store = Store(target) if target is not None else None
    lock = store.locked() if store else _nullcontext()
    with lock:
        for i, (shown, path, _) in enumerate(jobs):
            if out[i].result.changed:
                atomic_write(path, out[i].result.source.encode("utf-8"), path.stat().st_mode & 0o777)
                drop_bytecode(path)
                out[i] = StripFileResult(shown, out[i].result, out[i].diff, True)
    return out


def _nullcontext():
    from contextlib import nullcontext  # noqa: PLC0415

    return nullcontext()

