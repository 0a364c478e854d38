"""The hash-only fast path of ``verify`` (and of the vLLM plugin's start-up check).

It answers "everything is exactly as the last apply left it" from the manifest, the catalog's
content hash, the dist-info RECORD hashes and the managed files' hashes, importing nothing but
``os``, ``json`` and ``hashlib`` (``pathlib``, ``dataclasses``, ``logging``, ``argparse`` and
``packaging`` each cost more than the whole goal allows).  Anything else — no manifest, a
changed file, a reinstalled distribution, a changed catalog — returns ``None`` and the caller
takes the full path in :mod:`vllm_compat.api`, which explains what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os

STATE_DIR = ".vllm_compat"


def _sha(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def catalog_root() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "patches")


def catalog_digest(root: str | None = None) -> str:
    """Content hash of every ``.py`` file of the catalog (patch modules and shims)."""
    root = root or catalog_root()
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    data = fh.read()
                h.update(os.path.relpath(path, root).encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def _version(dist_info: str) -> str | None:
    try:
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("Version:"):
                    return line[8:].strip()
                if not line.strip():
                    return None
    except OSError:
        return None
    return None


def verified(site: str) -> dict | None:
    """The manifest's summary when the site verifies, else ``None`` (take the full path)."""
    state = os.path.join(site, STATE_DIR)
    if os.path.exists(os.path.join(state, "journal.json")):
        return None
    try:
        with open(os.path.join(state, "manifest.json"), "rb") as fh:
            manifest = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if manifest.get("format") != 1 or not manifest.get("files") or manifest.get("catalog") != catalog_digest():
        return None
    real_site = os.path.realpath(site)
    for snap in manifest["dists"].values():
        dist_info = os.path.join(site, snap["dist_info"])
        if _version(dist_info) != snap["version"] or _sha(os.path.join(dist_info, "RECORD")) != snap["record"]:
            return None
    for rel, rec in manifest["files"].items():
        path = os.path.join(site, rel)
        # Hostile manifests: anything outside the site is left to the full path to refuse.
        if os.path.isabs(rel) or ".." in rel.split("/") or os.path.islink(path) or \
                not os.path.realpath(path).startswith(real_site + os.sep):
            return None
        if _sha(path) != rec["applied"]:
            return None
    return manifest


def default_site() -> str:
    import sysconfig  # noqa: PLC0415

    return sysconfig.get_paths()["purelib"]
