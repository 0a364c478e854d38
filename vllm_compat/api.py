"""The commands as functions: each takes a :class:`Target` and returns a frozen result.

No printing and no ``sys.exit`` here: the CLI, the vLLM plugin and the runner's preflight all
call these and render or act on the results themselves.  ``status`` and ``verify`` never import
libcst (``verify`` on an up-to-date site does not even load the catalogs).  The planning they
share is in :mod:`.plan`; ``record`` is in :mod:`.record`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .commit import ApplyResult, apply_plan, check_writable, udiff
from .plan import Plan, make_plan, read
from .report import CommandError, Exit, RecordResult, Report
from .state import APPLIED, DRIFTED, OBSOLETE, FileState, PatchState
from .store import Store
from .target import Target, TargetError, sha256_bytes

__all__ = [
    "ApplyResult", "CommandError", "Exit", "RecordResult", "Report", "RevertResult", "StripFileResult", "TargetError",
    "apply", "check", "diff", "expected_content", "record", "revert", "status", "strip_debug", "verify",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RevertResult:
    restored: tuple[str, ...]
    removed: tuple[str, ...]


# -- status / verify ----------------------------------------------------------------------

def status(target: Target) -> Report:
    """Every patch's and managed file's state, and the advisories that match (slow path; never
    imports libcst)."""
    plan = make_plan(target)
    _require_installed(plan, "report")
    return plan.report


def _require_installed(plan: Plan, what: str) -> None:
    """A site holding none of the distributions the catalogs patch, and never patched, has
    nothing to report, apply or revert: an environment error (exit 3), never a vacuous "ok"."""
    targets = {p.target for p in plan.catalog.patches}
    if targets and not any(plan.dists.get(t) for t in targets) and plan.manifest is None:
        raise CommandError(f"{', '.join(sorted(targets))} is not installed in {plan.target.site}: nothing to {what}",
                           Exit.ENV)


def _fast_verify(target: Target) -> Report | None:
    """Answer from the manifest and hashes alone when everything is as apply left it."""
    from .fast import todo_notes, verified  # noqa: PLC0415

    manifest = verified(str(target.site), target.catalogs)
    if manifest is None:
        return None
    files = tuple(FileState(rel, APPLIED, tuple(rec["patches"])) for rel, rec in manifest["files"].items())
    patches = tuple(PatchState(pid, "", APPLIED) for pid in manifest["patches"])
    patches += tuple(PatchState(pid, "", OBSOLETE) for pid in manifest["obsolete"])
    versions = {pkg: snap["version"] for pkg, snap in manifest["dists"].items()}
    return Report(str(target.site), versions, patches, files, fast=True, notes=tuple(todo_notes(manifest)))


def verify(target: Target) -> Report:
    """Exit code 0 only when every applicable patch is applied and every managed file matches."""
    fast = _fast_verify(target)
    if fast is not None:
        return fast
    plan = make_plan(target)
    _require_installed(plan, "verify")
    return plan.report


# -- apply ---------------------------------------------------------------------------------

def apply(target: Target, dry_run: bool = False, allow_unsupported: bool = False) -> ApplyResult:
    """Bring every applicable patch to the applied state, all files or none."""
    store = Store(target)
    if dry_run or not store.dir.exists():  # (refuse before the lock creates the state folder)
        plan = make_plan(target)
        _require_installed(plan, "apply")
        if dry_run:
            return apply_plan(plan, dry_run=True, allow_unsupported=allow_unsupported)
    with store.locked():
        store.recover()
        plan = make_plan(target)
        _require_installed(plan, "apply")
        return apply_plan(plan, dry_run=False, allow_unsupported=allow_unsupported)


# -- revert / diff / record ------------------------------------------------------------------

def revert(target: Target, force: bool = False) -> RevertResult:
    """Back to the wheel's files (proven against RECORD); vendored shims and state removed."""
    store = Store(target)
    if not store.dir.exists():  # never applied: nothing to restore (and no state folder to create)
        _require_installed(make_plan(target), "revert")
        return RevertResult((), ())
    with store.locked():
        store.recover()
        manifest = store.manifest()
        if manifest is None:
            return RevertResult((), ())
        plan = make_plan(target)
        drifted = [f.path for f in plan.report.files if f.state == DRIFTED and f.path in manifest.files]
        if drifted and not force:
            raise CommandError("refusing to revert hand-edited files (use --force to discard the edits): " + ", ".join(drifted), Exit.DRIFTED)
        writes: dict[str, bytes | None] = {}
        for rel, rec in manifest.files.items():
            current = read(target, rel)
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
        check_writable(target, writes)
        store.commit(writes, {}, None)
    return RevertResult(tuple(r for r, d in writes.items() if d is not None), tuple(r for r, d in writes.items() if d is None))


def diff(target: Target) -> dict[str, str]:
    """Unified diffs of every managed file against the wheel's pristine content."""
    plan = make_plan(target)
    out = {}
    for fs in plan.report.files:
        current = read(target, fs.path)
        if plan.is_shim(fs.path):
            base = None
        else:
            try:
                base = plan.pristine(fs.path, fs)
            except CommandError:
                continue
        if current != base:
            out[fs.path] = udiff(fs.path, base, current)
    return out


def expected_content(target: Target, rel: str) -> bytes:
    """What ``rel`` should contain now: pristine plus the applicable patches (for strip-debug)."""
    plan = make_plan(target)
    fs = next((f for f in plan.report.files if f.path == rel), None)
    if fs is None:
        raise CommandError(f"{rel} is not managed by vllm-compat", Exit.USAGE)
    data = plan.expected_bytes(fs)
    return data if data is not None else plan.shim_source(rel)


def record(target: Target, name: str, packages: tuple[str, ...] = (), wheels: tuple[str, ...] = (),
           allow_unsupported: bool = False) -> RecordResult:
    """Turn the hand edits of installed files into a patch module ``NAME.py`` in a user catalog
    (the first ``--catalog``, else pyproject.toml's first), all or nothing (:mod:`.record`)."""
    from .record import record as run  # noqa: PLC0415 - libcst

    return run(target, name, packages, wheels, allow_unsupported)


# -- check / strip-debug -------------------------------------------------------------------

def _vllm_root(target: Target) -> str:
    if target.find("vllm") is not None:
        return str(target.site)
    own = Target.resolve()
    if own.find("vllm") is None:
        raise CommandError(f"vLLM is installed neither in {target.site} nor in {own.site}", Exit.ENV)
    return str(own.site)


def check(target: Target, plan: Plan | None = None):
    """Statically bind the managed files' vLLM imports, calls and methods, and every file of the
    distributions the catalogs name as binding to vLLM (``CHECKED``: hs-connectors), to the vLLM
    source installed beside them (:mod:`vllm_compat.check`); returns its ``CheckReport``.
    (``plan``: one made with other catalogs, as ``check --against`` does.)"""
    from pathlib import Path  # noqa: PLC0415

    from .check import check_sources  # noqa: PLC0415

    plan = plan if plan is not None else make_plan(target)
    files = {}
    # Every file a catalog patch targets (not only those patched for this vLLM): an unpatched
    # file that calls vLLM must bind too.
    rels = {f.path for f in plan.report.files} | {r for p in plan.catalog.patches for r in p.files}
    for pkg in sorted(plan.catalog.checked):
        if plan.dists.get(pkg) is not None:
            rels |= _python_files(target, pkg)
    for rel in sorted(rels):
        data = read(target, rel)
        if data is not None:
            files[rel] = data.decode("utf-8", "replace")
    return check_sources(files, Path(_vllm_root(target)))


def _python_files(target: Target, package: str) -> set[str]:
    """The ``.py`` files of an installed import package, relative to the site."""
    import os  # noqa: PLC0415

    root = target.site / package
    out = set()
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out |= {os.path.relpath(os.path.join(folder, n), target.site) for n in names if n.endswith(".py")}
    return out


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
    from .strip import StripError  # noqa: PLC0415
    from .strip import strip_debug as strip

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
        diff = udiff(shown, current.encode(), result.source.encode()) if result.changed else ""
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

