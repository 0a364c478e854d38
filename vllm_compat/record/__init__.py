"""``vllm-compat record NAME``: hand edits of installed files become a patch module in a user
catalog, patch-package style.

A file counts as edited where it differs from what the engine would put there: a managed
file from the bytes apply wrote, any other Python file of the packages looked at from its
wheel's RECORD hash.  Each edit is expressed against that content (:mod:`.edits`); the
module ``NAME.py`` declares one patch per package, ranged to the installed versions (``==``
the package, ``>=`` the installed vLLM), ordered after every patch of any catalog that edits
the same file in overlapping ranges, its why / upstream / remove-when left as TODO.  Before a
byte is written the catalogs are planned again with the module as written, and each edited
file must come out as the user's bytes (or, stated, the same AST).  Then the module is
written and the site committed as ``apply`` commits it (manifest, pristine backups), under
the site's lock; a failure of that commit removes the module again.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import replace
from pathlib import Path

from ..catalog.sources import nearest_pyproject, pyproject_catalogs
from ..catalog.patch import Patch
from ..plan import Plan, load_catalog, make_plan, read
from ..report import CommandError, Exit, RecordResult
from ..state import APPLIED, STALE
from ..store import Store, atomic_write
from ..target import Dist, Target, sha256_bytes
from .module import TODO, declared, render, same_edits

__all__ = ["record"]

log = logging.getLogger(__name__)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _refuse(message: str) -> CommandError:
    return CommandError(message, Exit.RECORD)


def _destination(target: Target) -> str:
    if target.catalogs:
        return target.catalogs[0]
    pyproject = nearest_pyproject(os.getcwd())
    found = pyproject_catalogs(pyproject, exact=True) if pyproject else []
    if not found:
        raise CommandError("record writes into a user catalog: give --catalog DIR, or name one in "
                           "[tool.vllm-compat] catalogs of pyproject.toml", Exit.USAGE)
    return os.path.abspath(os.path.join(os.path.dirname(pyproject), found[0]))


def _in_use_by_default(target: Target, dest: str) -> bool:
    """Whether commands find ``dest`` without ``--catalog`` (pyproject.toml, an entry point)."""
    from ..catalog.sources import SourceError, discover  # noqa: PLC0415

    try:
        sources, _ = discover(str(target.site), (), exact=True, missing_ok=(dest,))
    except SourceError:
        return False
    return any(os.path.realpath(s.root) == os.path.realpath(dest) for s in sources)


def _edited(plan: Plan, packages: list[str]) -> tuple[dict[str, tuple[str, bytes | None, bytes]], list[str]]:
    """``{rel: (package, base or None (pristine, not at hand), current)}`` of the edited
    Python files, and notes on the files left alone."""
    by_file = {f.path: f for f in plan.report.files}
    manifest = plan.manifest
    known = {p.id for p in plan.catalog.patches}
    out: dict[str, tuple[str, bytes | None, bytes]] = {}
    notes: list[str] = []
    for pkg in packages:
        dist = plan.dists.get(pkg) or plan.target.find(pkg)
        if dist is None:
            raise CommandError(f"{pkg} is not installed in {plan.target.site}", Exit.USAGE)
        for rel, want in sorted(dist.record.items()):
            if not (rel.startswith(pkg + "/") or rel == pkg + ".py"):
                continue
            current = read(plan.target, rel)
            if current is None:
                notes.append(f"{rel} is missing (not recorded)")
                continue
            digest = sha256_bytes(current)
            fs, rec = by_file.get(rel), manifest.files.get(rel) if manifest else None
            # patches apply used that no catalog declares any more (a recorded module deleted to
            # record its file again): what they did counts as hand edits
            gone = [pid for pid in rec.patches if pid not in known] if rec is not None else []
            if digest == want or (rec is not None and digest == rec.applied and not gone) or (fs and fs.state == APPLIED):
                continue
            if not rel.endswith(".py"):
                notes.append(f"{rel} differs from RECORD but is not Python source (not recorded)")
                continue
            if rec is not None:
                base = plan.expected_bytes(fs)
                if base == current:
                    continue
                if sha256_bytes(base) != rec.applied and not gone:
                    why = fs.detail if fs.state == STALE else "the patches for it changed since apply"
                    raise _refuse(f"{rel}: your edit is against the file apply wrote, which the patches no longer "
                                  f"give ({why}); save your edit elsewhere, `vllm-compat revert --force`, apply, "
                                  f"and edit again")
                out[rel] = (pkg, base, current)
            elif fs is not None and fs.patches:
                raise _refuse(f"{rel} is edited, but the catalogs' patches for it ({', '.join(fs.patches)}) were "
                              f"never applied, so the edit cannot be told from theirs: save your edit elsewhere, "
                              f"reinstall {dist.name}, `vllm-compat apply`, and edit again")
            else:
                out[rel] = (pkg, None, current)
    for rel, rec in (manifest.files.items() if manifest else ()):
        if rec.shim and rec.dist in packages and sha256_bytes(read(plan.target, rel) or b"") != rec.applied:
            raise _refuse(f"{rel} is a vendored shim: edit its source in the catalog instead")
    return out, notes


def _from_wheels(dist: Dist, rels: list[str], wheels: tuple[str, ...]) -> dict[str, bytes]:
    """Pristine bytes of ``rels`` (proven against RECORD) from ``wheels``, else from the wheel
    ``pip download`` fetches for the installed version."""
    want = {rel: dist.record[rel] for rel in rels}
    found: dict[str, bytes] = {}

    def take(whl: str) -> None:
        try:
            with zipfile.ZipFile(whl) as zf:
                names = set(zf.namelist())
                for rel, digest in want.items():
                    if rel in names and rel not in found:
                        data = zf.read(rel)
                        if sha256_bytes(data) == digest:
                            found[rel] = data
        except (OSError, zipfile.BadZipFile) as exc:
            raise CommandError(f"cannot read the wheel {whl}: {exc}", Exit.USAGE) from None

    for whl in wheels:
        take(whl)
    if len(found) < len(want):
        with tempfile.TemporaryDirectory() as tmp:
            log.info("downloading %s==%s for the pristine copies of %s", dist.name, dist.version, ", ".join(want))
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                                   "-q", "-d", tmp, f"{dist.name}=={dist.version}"], capture_output=True, text=True)
            for name in sorted(os.listdir(tmp)) if proc.returncode == 0 else ():
                if name.endswith(".whl"):
                    take(os.path.join(tmp, name))
    missing = sorted(set(want) - set(found))
    if missing:
        raise _refuse(f"no pristine copy of {', '.join(missing)}: apply never backed it up, and no wheel matched "
                      f"its RECORD hash; pass --wheel with {dist.name} {dist.version}'s wheel")
    return found


def _patch(plan: Plan, pkg: str, name: str, edits: list) -> Patch:
    from ..catalog.loader import overlap  # noqa: PLC0415
    from ..catalog.versions import public  # noqa: PLC0415

    dist, vllm = plan.dists.get(pkg) or plan.target.find(pkg), plan.dists.get("vllm") or plan.target.find("vllm")
    requires = {"vllm": f">={public(vllm.version)}"} if vllm is not None and pkg != "vllm" else {}
    new = Patch(id=f"{pkg}.{name}", target=pkg, target_versions=f"=={public(dist.version)}", requires=requires,
                edits=tuple(edits), **TODO)
    files = set(new.files)
    after = tuple(p.id for p in plan.catalog.patches if files & set(p.files) and overlap(p, new))
    return replace(new, after=after)


def _local(pid: str, dest_name: str) -> str:
    """How a module of catalog ``dest_name`` names patch ``pid`` in ``after``."""
    return pid.split(":", 1)[1] if pid.startswith(dest_name + ":") else pid


def record(target: Target, name: str, packages: tuple[str, ...], wheels: tuple[str, ...],
           allow_unsupported: bool) -> RecordResult:
    from ..catalog.loader import CatalogError  # noqa: PLC0415
    from ..commit import apply_plan  # noqa: PLC0415
    from .edits import RecordError, record_edits  # noqa: PLC0415 - libcst

    if not _NAME.fullmatch(name):
        raise CommandError(f"bad patch name {name!r}: use a Python identifier (it names NAME.py)", Exit.USAGE)
    dest = _destination(target)
    module_path = Path(dest) / f"{name}.py"
    if module_path.exists():
        raise _refuse(f"{module_path} exists: choose another name, or delete it to record its file(s) again")
    store = Store(target)
    with store.locked():
        store.recover()
        catalog = load_catalog(target, missing_ok=(dest,))
        source = next(s for s in catalog.sources if os.path.realpath(s.root) == os.path.realpath(dest))
        plan = make_plan(target, catalog)
        pkgs = list(packages) or sorted({p.target for p in catalog.patches if plan.dists.get(p.target)})
        edited, notes = _edited(plan, pkgs)
        if not edited:
            raise _refuse(f"no hand edits to record in {', '.join(pkgs)} ({target.site})")
        pristine: dict[str, bytes] = {}
        for pkg in sorted({pkg for pkg, base, _ in edited.values() if base is None}):
            rels = [rel for rel, (p, base, _) in edited.items() if p == pkg and base is None]
            pristine |= _from_wheels(plan.dists.get(pkg) or target.find(pkg), rels, wheels)
        by_pkg: dict[str, list] = {}
        for rel, (pkg, base, current) in edited.items():
            try:
                found = record_edits(rel, (base or pristine[rel]).decode("utf-8"), current.decode("utf-8"))
            except UnicodeDecodeError:
                raise _refuse(f"{rel} is not UTF-8 text") from None
            except RecordError as exc:
                raise _refuse(str(exc)) from None
            by_pkg.setdefault(pkg, []).extend(found.edits)
        patches = [_patch(plan, pkg, name, edits) for pkg, edits in sorted(by_pkg.items())]
        local = [replace(p, after=tuple(_local(a, source.name) for a in p.after)) for p in patches]
        versions = ", ".join(f"{k} {v}" for k, v in sorted(plan.report.versions.items()))
        text = render(name, local, f"Recorded by `vllm-compat record {name}` from hand edits of "
                                   f"{', '.join(sorted(edited))} ({versions}).")
        loaded = declared(text, str(module_path))
        if len(loaded) != len(local) or not all(same_edits(a, b) for a, b in zip(loaded, local)):
            raise _refuse("internal error: the module's text does not declare the edits checked")
        try:
            new_catalog = catalog.extended(catalog.qualified(loaded, source, str(module_path)), source)
        except CatalogError as exc:
            raise _refuse(f"the recorded patch does not fit the catalogs: {exc}") from None
        new_plan = make_plan(target, new_catalog, pristine)
        differences, overwrite = {}, set()
        for fs in new_plan.report.files:
            if fs.path in edited:
                differences[fs.path] = _difference(fs.path, new_plan.expected_bytes(fs), edited[fs.path][2])
                if differences[fs.path]:
                    overwrite.add(fs.path)
        differences = {k: v for k, v in differences.items() if v}
        created = not os.path.isdir(dest)
        atomic_write(module_path, text.encode("utf-8"))
        try:
            applied = apply_plan(new_plan, dry_run=False, allow_unsupported=allow_unsupported, overwrite=frozenset(overwrite))
        except BaseException:
            module_path.unlink()
            if created:
                os.rmdir(dest)
            raise
    kinds = {rel: tuple(type(e).__name__ for p in loaded for e in p.edits if e.file == rel) for rel in sorted(edited)}
    return RecordResult(str(module_path), tuple(p.id for p in new_catalog.patches if p.module == str(module_path)),
                        kinds, differences, _in_use_by_default(target, dest), tuple(notes), applied.written)


def _difference(rel: str, expected: bytes, current: bytes) -> str:
    """"" where the patches give the user's bytes; else the diff (the same AST, or refused)."""
    import ast  # noqa: PLC0415
    import difflib  # noqa: PLC0415

    if expected == current:
        return ""
    if ast.dump(ast.parse(expected)) != ast.dump(ast.parse(current)):
        raise _refuse(f"{rel}: the catalogs with the recorded patch do not give your code")
    return "".join(difflib.unified_diff(current.decode().splitlines(keepends=True), expected.decode().splitlines(keepends=True),
                                        f"{rel} (your edit)", f"{rel} (what the patch gives)"))
