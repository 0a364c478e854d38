"""Carrying out a plan: the refusals (unsupported, hand-edited), then every file or none through
the store's journal, and the manifest.  Shared by ``apply`` and ``record`` (:mod:`.api`,
:mod:`.record`), which both build the plan and leave the committing to this module."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .catalog.patch import todo_fields
from .plan import Plan, read
from .report import CommandError, Exit, Report
from .state import APPLIED, DRIFTED, NOT_APPLICABLE, OBSOLETE, FileState, dist_snapshot
from .store import FileRecord, Manifest
from .target import Target, sha256_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApplyResult:
    report: Report  # the state before the run
    written: tuple[str, ...]
    diffs: dict[str, str] = field(default_factory=dict)  # dry runs only
    dry_run: bool = False
    nothing_to_do: bool = False  # the state was already complete: not a byte was written


def _adoptable(plan: Plan, fs: FileState) -> bool:
    """A hand-edited file that already holds what the patches produce (as `record` leaves it)."""
    try:
        return plan.expected_bytes(fs) == read(plan.target, fs.path)
    except CommandError:
        return False


def apply_plan(plan: Plan, dry_run: bool, allow_unsupported: bool, overwrite: frozenset[str] = frozenset()) -> ApplyResult:
    """Carry out ``plan`` (``overwrite``: hand-edited files whose edits a recorded patch now holds)."""
    report = plan.report
    if report.unsupported and not allow_unsupported:
        raise CommandError("; ".join(report.unsupported) + " (use --allow-unsupported to patch anyway)", Exit.UNSUPPORTED)
    drifted = [f.path for f in report.files if f.state == DRIFTED and f.path not in overwrite and not _adoptable(plan, f)]
    if drifted:
        raise CommandError("hand-edited files (keep the edits as a patch with `vllm-compat record NAME`, "
                           "or discard them with revert --force or a reinstall): " + ", ".join(drifted), Exit.DRIFTED)
    if report.code == Exit.OK or (report.code == Exit.UNSUPPORTED and all(
            f.state in (APPLIED, "pristine") for f in report.files) and all(
            p.state in (APPLIED, NOT_APPLICABLE, OBSOLETE) for p in report.patches)):
        return ApplyResult(report, (), nothing_to_do=True)
    writes: dict[str, bytes | None] = {}
    backups: dict[str, bytes] = {}
    new_files: dict[str, FileRecord] = {}
    plan.prefetch(list(report.files))
    for fs in report.files:
        rel = fs.path
        if plan.is_shim(rel):
            data = plan.expected_bytes(fs)
            if data is not None:
                new_files[rel] = FileRecord(plan.owner(rel), None, sha256_bytes(data), list(fs.patches), shim=True)
        else:
            pristine = plan.pristine(rel, fs)
            data = plan.expected_bytes(fs, pristine)  # the pristine bytes where no patch wants it any more
            if fs.patches:
                new_files[rel] = FileRecord(plan.owner(rel), sha256_bytes(pristine), sha256_bytes(data), list(fs.patches))
            if plan.store.backup(rel) != pristine:
                backups[rel] = pristine
        if data != read(plan.target, rel):
            writes[rel] = data
    if dry_run:
        diffs = {rel: udiff(rel, read(plan.target, rel), data) for rel, data in writes.items()}
        return ApplyResult(report, (), diffs, dry_run=True)
    if plan.proof is not None and {r: f.applied for r, f in new_files.items()} != plan.proof["bound"]["files"]:
        raise CommandError("the files apply would write are not those proven on this machine "
                           f"({plan.proof['date']}): prove again after apply --allow-unsupported", Exit.UNSUPPORTED)
    check_writable(plan.target, writes)
    combined, parts = plan.catalog.digests()
    applicable = plan.applicable()
    manifest = Manifest(
        catalog=combined,
        dists={pkg: dist_snapshot(d) for pkg, d in plan.dists.items() if d is not None},
        patches=[p.id for p in applicable],
        obsolete=[d.patch.id for d in plan.decisions if d.status == "obsolete"],
        files=new_files, digests=parts, entry_points=plan.catalog.entry_points,
        todo={p.id: todo_fields(p) for p in plan.catalog.patches if todo_fields(p)},
        advisories=[m.advisory.id for m in plan.report.advisories],
        absent=sorted(pkg for pkg, d in plan.dists.items() if d is None),
    )
    plan.store.commit(writes, backups, manifest)
    log.info("patched %d file(s) in %s", len(writes), plan.target.site)
    return ApplyResult(report, tuple(sorted(writes)))


def check_writable(target: Target, writes: dict[str, bytes | None]) -> None:
    import os  # noqa: PLC0415

    for rel in writes:
        path = target.path(rel)
        folder = path.parent if path.parent.exists() else target.site
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise CommandError(f"not writable: {path}", Exit.ENV)


def udiff(rel: str, before: bytes | None, after: bytes | None) -> str:
    import difflib  # noqa: PLC0415 - dry runs and `diff` only

    a = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    b = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, f"a/{rel}", f"b/{rel}"))
