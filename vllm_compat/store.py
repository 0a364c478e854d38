"""What the engine keeps inside the target site-packages (``.vllm_compat/``): the manifest,
pristine backups, a lock, and a journal that makes a multi-file write all-or-nothing.

Every write is atomic (temp file in the same folder, fsync, ``os.replace``).  A run writes in
this order: new contents and backups into ``staging/``, then ``journal.json`` (the commit
point), then the managed files, then the manifest, then removes the journal.  A run killed
before the journal exists changed nothing; one killed after it is rolled forward by the next
command (:func:`recover`), since everything needed is staged.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .target import Target, TargetError, sha256_bytes, sha256_file

__all__ = ["Manifest", "Store", "atomic_write"]

log = logging.getLogger(__name__)
FORMAT = 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int | None = None, dirs: set[Path] | None = None) -> None:
    """Replace ``path`` by ``data`` so a reader sees the old or the new content, never a mix.

    ``dirs``: collect the folder to fsync later, once for all the files written into it
    (:func:`_fsync_dirs`), instead of now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.vllm-compat-tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)
    if dirs is None:
        _fsync_dir(path.parent)
    else:
        dirs.add(path.parent)


def _fsync_dirs(dirs: set[Path]) -> None:
    for folder in sorted(dirs):
        _fsync_dir(folder)
    dirs.clear()


@dataclass
class FileRecord:
    dist: str  # import package of the owning distribution ("speculators")
    pristine: str | None  # sha256 from the wheel's RECORD (None for vendored shims)
    applied: str  # sha256 after patching
    patches: list[str]
    shim: bool = False


@dataclass
class Manifest:
    """What the last successful apply wrote, and what it was written against."""

    catalog: str = ""  # digest of the engine and every catalog in use (vllm_compat.catalog.sources)
    dists: dict[str, dict[str, str]] = field(default_factory=dict)  # pkg -> version, record, dist_info
    patches: list[str] = field(default_factory=list)  # applied patch ids, in order
    obsolete: list[str] = field(default_factory=list)
    files: dict[str, FileRecord] = field(default_factory=dict)
    digests: dict = field(default_factory=dict)  # the parts of `catalog`, to say what changed
    entry_points: dict = field(default_factory=dict)  # the site's catalog entry points, cached
    todo: dict[str, list[str]] = field(default_factory=dict)  # patch id -> fields still "TODO"
    advisories: list[str] = field(default_factory=list)  # advisories that matched at apply (fast path: none may)
    absent: list[str] = field(default_factory=list)  # packages the catalogs look at that were not installed

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "catalog": self.catalog,
            "dists": self.dists,
            "patches": self.patches,
            "obsolete": self.obsolete,
            "files": {k: vars(v) for k, v in sorted(self.files.items())},
            "digests": self.digests,
            "entry_points": self.entry_points,
            "todo": self.todo,
            "advisories": self.advisories,
            "absent": self.absent,
        }
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, target: Target) -> "Manifest":
        try:
            raw = json.loads(data)
            if raw.get("format") != FORMAT:
                raise ValueError(f"unknown manifest format {raw.get('format')!r}")
            files = {}
            for rel, rec in raw["files"].items():
                target.path(rel)  # refuses "..", absolute paths and symlinks out of the site
                files[rel] = FileRecord(**rec)
            return cls(raw["catalog"], raw["dists"], list(raw["patches"]), list(raw["obsolete"]), files,
                       dict(raw.get("digests", {})), dict(raw.get("entry_points", {})), dict(raw.get("todo", {})),
                       list(raw.get("advisories", [])), list(raw.get("absent", [])))
        except TargetError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise TargetError(f"corrupt manifest {target.state_dir / 'manifest.json'}: {exc}") from exc


class Store:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.dir = target.state_dir

    # -- reading (the fast path: no lock, no writes) ------------------------------------
    def manifest(self) -> Manifest | None:
        try:
            data = (self.dir / "manifest.json").read_bytes()
        except FileNotFoundError:
            return None
        return Manifest.from_json(data, self.target)

    def backup(self, rel: str) -> bytes | None:
        try:
            return (self.dir / "backup" / rel).read_bytes()
        except FileNotFoundError:
            return None

    def has_journal(self) -> bool:
        return (self.dir / "journal.json").exists()

    # -- writing ------------------------------------------------------------------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive lock for a writing command; concurrent runs wait instead of interleaving."""
        if not os.access(self.target.site, os.W_OK):
            raise TargetError(f"site-packages is not writable: {self.target.site}")
        lock = self.dir / "lock"
        while True:
            try:
                self.dir.mkdir(exist_ok=True)
                fh = open(lock, "a+")
            except OSError as exc:
                raise TargetError(f"cannot create {self.dir}: {exc}") from exc
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                held, now = os.fstat(fh.fileno()), os.stat(lock)
                if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                    break
            except FileNotFoundError:
                pass
            fh.close()  # the previous holder removed the state folder: lock the new one
        with fh:
            try:
                yield
            finally:
                # Leave no trace when nothing but our lock is left (revert, or a refused run
                # on a site never patched); removed while held, so waiters retry above.
                try:
                    if os.listdir(self.dir) == ["lock"]:
                        lock.unlink()
                        self.dir.rmdir()
                except OSError:
                    pass
                fcntl.flock(fh, fcntl.LOCK_UN)

    def commit(self, writes: dict[str, bytes | None], backups: dict[str, bytes],
               manifest: Manifest | None) -> None:
        """Write ``writes`` (None deletes the file) and the manifest all-or-nothing.

        ``manifest=None`` removes the whole state folder at the end (revert)."""
        staging = self.dir / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        entries = []
        dirs: set[Path] = set()  # fsynced once each, before the commit point
        for i, (rel, data) in enumerate(sorted(writes.items())):
            self.target.path(rel)
            if data is not None:
                atomic_write(staging / str(i), data, dirs=dirs)
            entries.append({"path": rel, "staged": None if data is None else str(i),
                            "sha": None if data is None else sha256_bytes(data)})
        for rel, data in backups.items():
            atomic_write(self.dir / "backup" / rel, data, dirs=dirs)
        if manifest is not None:
            atomic_write(staging / "manifest.json", manifest.to_json(), dirs=dirs)
        _fsync_dirs(dirs)
        journal = {"files": entries, "manifest": manifest is not None}
        atomic_write(self.dir / "journal.json", json.dumps(journal).encode())  # commit point
        self._roll_forward(journal)

    def _roll_forward(self, journal: dict) -> None:
        staging = self.dir / "staging"
        dirs: set[Path] = set()  # fsynced once each, before the journal goes
        for entry in journal["files"]:
            path = self.target.path(entry["path"])
            if entry["staged"] is None:
                if path.exists():
                    path.unlink()
                    dirs.add(path.parent)
            elif sha256_file(path) != entry["sha"]:
                mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
                atomic_write(path, (staging / entry["staged"]).read_bytes(), mode, dirs=dirs)
            drop_bytecode(path)
        _fsync_dirs(dirs)
        if journal["manifest"]:
            atomic_write(self.dir / "manifest.json", (staging / "manifest.json").read_bytes())
            (self.dir / "journal.json").unlink()
            shutil.rmtree(staging, ignore_errors=True)
        else:  # revert: no state remains; the journal goes last, the lock with the lock
            for name in os.listdir(self.dir):
                if name not in ("journal.json", "lock"):
                    child = self.dir / name
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
            (self.dir / "journal.json").unlink()

    def recover(self) -> bool:
        """Finish a run that was killed after its commit point; drop one killed before it."""
        journal_path = self.dir / "journal.json"
        if journal_path.exists():
            try:
                journal = json.loads(journal_path.read_bytes())
            except ValueError:  # torn journal: atomic_write makes this impossible, unless edited
                raise TargetError(f"unreadable journal {journal_path}; inspect it by hand") from None
            log.warning("completing an interrupted run recorded in %s", journal_path)
            self._roll_forward(journal)
            return True
        if (self.dir / "staging").exists():
            shutil.rmtree(self.dir / "staging")  # killed before the commit point
        return False


def drop_bytecode(path: Path) -> None:
    """Remove cached bytecode of a module we rewrote: a stale .pyc can hide a patch."""
    cache = path.parent / "__pycache__"
    if not cache.is_dir():
        return
    stem = path.stem + "."
    for name in os.listdir(cache):
        if name.startswith(stem) and name.endswith(".pyc"):
            try:
                (cache / name).unlink()
            except FileNotFoundError:
                pass
