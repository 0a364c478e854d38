"""``vllm-compat check --against vllm==X`` (or ``--wheel FILE``): the pre-upgrade check.

It builds a scratch site-packages in a temporary folder: the target release's wheel (fetched
with ``pip download --no-deps`` into the cache, :mod:`.wheels`) in place of the installed
distribution, and for every other package the catalogs look at, the installed one (symlinked;
a patched package is copied and brought back to its pristine files).  It plans and applies the
catalogs there, runs the static API check there, and reports per patch whether it applies,
does not match, or leaves API problems, and whether the release is inside the proven range.
The installed site is only read.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from . import wheels
from ..report import CommandError, Exit
from ..target import Target, sha256_bytes

__all__ = ["AgainstReport", "PatchResult", "check_against", "parse_spec"]

log = logging.getLogger(__name__)

APPLIES, NO_MATCH, API_PROBLEMS = "applies", "does-not-match", "api-problems"


@dataclass(frozen=True)
class PatchResult:
    id: str
    state: str  # applies | does-not-match | api-problems | not-applicable | obsolete
    detail: str = ""
    findings: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgainstReport:
    site: str  # the installed site (never written)
    versions: dict[str, str]  # package -> version in the scratch site
    wheels: dict[str, str]  # package -> the wheel used
    in_range: bool
    unsupported: tuple[str, ...]
    patches: tuple[PatchResult, ...]
    files_checked: int = 0
    calls_checked: int = 0
    other_findings: tuple[str, ...] = ()  # findings in files no applicable patch edits (hs-connectors' among them)
    notes: tuple[str, ...] = field(default_factory=tuple)
    files: tuple[str, ...] = ()  # the files the API check read
    advisories: tuple = ()  # AdvisoryMatch: known-bad combinations the release would make

    @property
    def code(self) -> Exit:
        states = {p.state for p in self.patches}
        if NO_MATCH in states:
            return Exit.TARGET
        if API_PROBLEMS in states or self.other_findings:
            return Exit.CHECK
        if not self.in_range and (APPLIES not in states or not self.calls_checked):
            return Exit.UNSUPPORTED  # outside the range and the catalogs do not reach it: nothing was proven
        if self.advisories:
            return Exit.ADVISORY
        return Exit.OK

    def to_dict(self) -> dict:
        return {"site": self.site, "versions": self.versions, "wheels": self.wheels, "in_range": self.in_range,
                "unsupported": list(self.unsupported), "exit_code": int(self.code), "result": self.code.name.lower(),
                "files_checked": self.files_checked, "calls_checked": self.calls_checked,
                "patches": [vars(p) | {"findings": list(p.findings)} for p in self.patches],
                "other_findings": list(self.other_findings), "notes": list(self.notes), "files": list(self.files),
                "advisories": [a.to_dict() for a in self.advisories]}


def parse_spec(spec: str) -> tuple[str, str]:
    """``"vllm==0.34.0"`` -> ``("vllm", "0.34.0")`` (only exact pins: this checks one release)."""
    name, sep, version = spec.partition("==")
    if not sep or not name.strip() or not version.strip() or any(c in version for c in "<>=!~*,"):
        raise CommandError(f"--against wants DIST==VERSION (one release), not {spec!r}", Exit.USAGE)
    return name.strip(), version.strip()


def _wheel_packages(whl: Path) -> tuple[str, set[str]]:
    """The dist-info folder name and the top-level import packages of a wheel."""
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        info = next((n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), None)
        if info is None:
            raise CommandError(f"{whl} is not a wheel (no .dist-info)", Exit.USAGE)
        if f"{info}/top_level.txt" in names:
            tops = set(zf.read(f"{info}/top_level.txt").decode().split())
        else:
            tops = {n.split("/")[0].removesuffix(".py") for n in names
                    if "/" in n and not n.split("/")[0].endswith((".dist-info", ".data"))}
    return info, tops


def fetch_wheels(specs: list[str], files: list[str]) -> list[Path]:
    """The wheels named by ``--against DIST==VERSION`` (fetched, cached) and ``--wheel FILE``."""
    out = []
    for spec in specs:
        name, version = parse_spec(spec)
        try:
            out.append(wheels.fetch(name, version))
        except wheels.NetworkError as exc:
            raise CommandError(f"{exc} (check --against needs the package index, or a cached wheel; "
                               f"or give the wheel with --wheel FILE)", Exit.NETWORK) from exc
        except wheels.UnknownRelease as exc:
            raise CommandError(str(exc), Exit.UNKNOWN_RELEASE) from exc
        except wheels.WheelError as exc:
            raise CommandError(str(exc), Exit.NETWORK) from exc
    for f in files:
        path = Path(f)
        if not path.is_file() or not path.name.endswith(".whl"):
            raise CommandError(f"--wheel: no such wheel file: {f}", Exit.USAGE)
        out.append(path.absolute())
    return out


def _link(src: Path, dst: Path) -> None:
    dst.symlink_to(src, target_is_directory=src.is_dir())


def _copy_pristine(target: Target, dist, pkg: str, scratch: Path) -> None:
    """Copy an installed patched package and its dist-info, its managed files put back to the
    wheel's bytes (from the state folder's backups, proven against RECORD)."""
    from ..store import Store  # noqa: PLC0415

    src = target.site / pkg
    if src.is_dir():
        shutil.copytree(src, scratch / pkg, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    elif (target.site / f"{pkg}.py").is_file():
        shutil.copy2(target.site / f"{pkg}.py", scratch / f"{pkg}.py")
    shutil.copytree(dist.dist_info, scratch / dist.dist_info.name)
    store = Store(target)
    manifest = store.manifest()
    for rel, rec in (manifest.files.items() if manifest else ()):
        if rec.dist != pkg:
            continue
        dest = scratch / rel
        if rec.shim:
            dest.unlink(missing_ok=True)
            continue
        backup = store.backup(rel)
        if backup is not None and sha256_bytes(backup) == dist.record.get(rel):
            dest.write_bytes(backup)


def build_scratch(target: Target, catalog, whls: list[Path], scratch: Path) -> dict[str, str]:
    """Fill ``scratch`` (see the module's docstring); returns {import package: wheel file name}."""
    from ..plan import _packages  # noqa: PLC0415

    patched = {p.target for p in catalog.patches}
    replaced: dict[str, str] = {}
    for whl in whls:
        info, tops = _wheel_packages(whl)
        if tops & set(replaced):
            raise CommandError(f"two wheels provide {', '.join(sorted(tops & set(replaced)))}", Exit.USAGE)
        if tops & (patched | set(catalog.checked)):
            wheels.unpack(whl, scratch)  # real files: apply edits them, check reads them
        else:
            tree = wheels.source_tree(whl)  # the Python sources are all the check reads
            for entry in sorted(os.listdir(tree)):
                if entry != ".complete":
                    _link(tree / entry, scratch / entry)
        replaced |= {t: whl.name for t in tops}
    for pkg in sorted(_packages(catalog) - set(replaced)):
        dist = target.find(pkg)
        if dist is None:
            continue
        if pkg in patched or pkg in catalog.checked:  # real files: apply edits them, check reads them
            _copy_pristine(target, dist, pkg, scratch)
        else:
            src = target.site / pkg if (target.site / pkg).exists() else target.site / f"{pkg}.py"
            _link(src.resolve(), scratch / src.name)
            _link(dist.dist_info.resolve(), scratch / dist.dist_info.name)
    return replaced


def _per_patch(plan, failing: dict[str, str]) -> None:
    """Find the patches whose anchors do not match: each file's patches one at a time, in order."""
    from ..plan import transformed  # noqa: PLC0415

    for fs in plan.report.files:
        if not fs.patches or plan.is_shim(fs.path):
            continue
        data = plan.pristine(fs.path, fs)
        for patch in plan.applicable(fs.patches):
            try:
                data = transformed(fs.path, data, [patch])
            except CommandError as exc:
                failing.setdefault(patch.id, str(exc))


def check_against(target: Target, specs: list[str], files: list[str]) -> AgainstReport:
    """The pre-upgrade check of ``target`` against the releases ``specs`` / wheel ``files``."""
    from .. import api  # noqa: PLC0415
    from ..plan import load_catalog, make_plan  # noqa: PLC0415

    if not specs and not files:
        raise CommandError("check --against/--wheel: name at least one release", Exit.USAGE)
    whls = fetch_wheels(specs, files)
    catalog = load_catalog(target)
    with tempfile.TemporaryDirectory(prefix="vllm-compat-against-") as tmp:
        scratch = Path(tmp) / "site-packages"
        scratch.mkdir()
        used = build_scratch(target, catalog, whls, scratch)
        st = Target(scratch, target.catalogs)
        plan = make_plan(st, catalog=catalog)
        missing = sorted(p for p in {q.target for q in catalog.patches} if plan.dists.get(p) is None)
        if missing:
            raise CommandError(f"{', '.join(missing)} is installed neither in {target.site} nor given: "
                               f"add --against {missing[0]}==VERSION", Exit.USAGE)
        unsupported = plan.report.unsupported
        failing: dict[str, str] = {}
        try:
            api.apply_plan(plan, dry_run=False, allow_unsupported=True)
        except CommandError as exc:
            if exc.code != Exit.TARGET:
                raise
            _per_patch(plan, failing)
            if not failing:
                raise
            rest = dataclasses.replace(catalog, patches=tuple(p for p in catalog.patches if p.id not in failing))
            plan = make_plan(st, catalog=rest)
            api.apply_plan(plan, dry_run=False, allow_unsupported=True)
        final = make_plan(st, catalog=plan.catalog)
        report = api.check(st, plan=final)
        versions = {k: v.version for k, v in plan.dists.items() if v}
        advisories = final.report.advisories
    return _summarize(target, catalog, plan, failing, report, versions, used, unsupported, advisories)


def _summarize(target, catalog, plan, failing, report, versions, used, unsupported, advisories) -> AgainstReport:
    by_file: dict[str, list[str]] = {}
    for p in catalog.patches:
        for rel in (*p.files, *(s.dest for s in p.shims)):
            by_file.setdefault(rel, []).append(p.id)
    decided = {d.patch.id: d for d in plan.decisions}
    applied = {p.id for p in plan.applicable()}
    found: dict[str, list[str]] = {}
    other = []
    for f in report.findings:
        text = f"{f.file}:{f.line}: {f.kind}: {f.message}"
        owners = [pid for pid in by_file.get(f.file, ()) if pid in applied]
        for pid in owners:
            found.setdefault(pid, []).append(text)
        if not owners:
            other.append(text)
    results = []
    for p in catalog.patches:
        if p.id in failing:
            results.append(PatchResult(p.id, NO_MATCH, failing[p.id]))
        elif p.id in found:
            results.append(PatchResult(p.id, API_PROBLEMS, f"{len(found[p.id])} finding(s)", tuple(found[p.id])))
        elif p.id in applied:
            results.append(PatchResult(p.id, APPLIES))
        else:
            d = decided.get(p.id)
            results.append(PatchResult(p.id, d.status if d else "not-applicable", d.reason if d else ""))
    notes = report.notes
    if unsupported and not (applied and report.calls_checked):
        notes += ("outside the proven range, and no patch applies or no vLLM call was bound: the catalogs "
                  "do not reach this release (a catalog update is needed)",)
    elif unsupported:
        notes += ("outside the proven range: after the upgrade, `vllm-compat apply --allow-unsupported` "
                  "then `vllm-compat prove` lets this machine supply the proof",)
    return AgainstReport(str(target.site), versions, used, not unsupported, tuple(unsupported), tuple(results),
                         report.files_checked, report.calls_checked, tuple(other), notes, report.files,
                         tuple(advisories))
