"""Per-file and per-patch states, computed from hashes alone (no libcst, no imports of the
target packages).

File states: ``pristine`` (sha256 equals the wheel's RECORD), ``applied`` (equals the recorded
post-patch hash), ``pending`` (should be patched and is not, or the engine or a catalog changed),
``drifted`` (neither: hand edits), ``stale`` (the owning distribution or a dependency was
reinstalled or upgraded since the state was written).  Patch states add ``not-applicable`` and
``obsolete`` (upstream already has the change).
"""

from __future__ import annotations

from dataclasses import dataclass

from .store import Manifest
from .target import Dist, Target, sha256_file

__all__ = ["FileState", "PatchState", "dist_snapshot", "file_state", "changed_dists"]

PRISTINE, APPLIED, PENDING, DRIFTED, STALE = "pristine", "applied", "pending", "drifted", "stale"
NOT_APPLICABLE, OBSOLETE = "not-applicable", "obsolete"


@dataclass(frozen=True)
class FileState:
    path: str
    state: str
    patches: tuple[str, ...]
    detail: str = ""


@dataclass(frozen=True)
class PatchState:
    id: str
    title: str
    state: str
    reason: str = ""
    files: tuple[str, ...] = ()


def dist_snapshot(dist: Dist) -> dict[str, str]:
    return {"version": dist.version, "record": dist.record_digest, "dist_info": dist.dist_info.name}


def changed_dists(manifest: Manifest, dists: dict[str, Dist | None]) -> dict[str, str]:
    """``{package: how it changed}`` for every distribution the manifest was written against."""
    out = {}
    for pkg, snap in manifest.dists.items():
        d = dists.get(pkg)
        if d is None:
            out[pkg] = f"{pkg} was uninstalled"
        elif d.version != snap["version"]:
            out[pkg] = f"{pkg} changed {snap['version']} -> {d.version}"
        elif d.record_digest != snap["record"]:
            out[pkg] = f"{pkg} {d.version} was reinstalled"
    return out


def file_state(target: Target, rel: str, pristine: str | None, expected_patches: tuple[str, ...],
               manifest: Manifest | None, stale_reason: str, catalog_changed: str) -> FileState:
    """The state of one managed (or to-be-managed) file; ``catalog_changed`` says how the
    engine or the catalogs in use changed since apply ("" where they did not)."""
    current = sha256_file(target.path(rel))
    rec = manifest.files.get(rel) if manifest else None
    if rec is not None and stale_reason:
        return FileState(rel, STALE, expected_patches, stale_reason)
    if rec is not None and current == rec.applied:
        if tuple(rec.patches) != expected_patches:
            return FileState(rel, PENDING, expected_patches, "the patches that apply changed since apply")
        if catalog_changed:
            return FileState(rel, PENDING, expected_patches, catalog_changed)
        return FileState(rel, APPLIED, expected_patches)
    if current is not None and current == pristine:
        return FileState(rel, PENDING if expected_patches else PRISTINE, expected_patches)
    if current is None:
        if pristine is None:  # a vendored shim not (or no longer) there
            return FileState(rel, PENDING if expected_patches else PRISTINE, expected_patches, "missing")
        return FileState(rel, DRIFTED, expected_patches, "file is missing")
    if pristine is None and rec is None:
        return FileState(rel, DRIFTED, expected_patches, "an unmanaged file is in the way of a shim")
    return FileState(rel, DRIFTED, expected_patches, "hand edits: matches neither RECORD nor the patched hash")
