"""The hash-only fast path of ``verify`` (and of the vLLM plugin's start-up check).

It answers "everything is exactly as the last apply left it" from the manifest, the content
hash of the engine and of every catalog in use (:mod:`.catalogs`), the dist-info RECORD
hashes and the managed files' hashes, importing nothing but ``os``, ``json`` and ``hashlib`` (``pathlib``, ``dataclasses``, ``logging``, ``argparse`` and
``packaging`` each cost more than the whole goal allows).  Anything else — no manifest, a
changed file, a reinstalled distribution, a changed catalog — returns ``None`` and the caller
takes the full path in :mod:`vllm_compat.api`, which explains what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os

from .catalog.sources import SourceError, digest, discover

STATE_DIR = ".vllm_compat"


def _sha(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


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


def verified(site: str, catalogs: tuple[str, ...] | list[str] = ()) -> dict | None:
    """The manifest's summary when the site verifies with the catalogs in use (the built-in
    one, ``catalogs`` given with ``--catalog``, pyproject.toml's, entry points'), else
    ``None`` (take the full path)."""
    state = os.path.join(site, STATE_DIR)
    if os.path.exists(os.path.join(state, "journal.json")):
        return None
    try:
        with open(os.path.join(state, "manifest.json"), "rb") as fh:
            manifest = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if manifest.get("format") != 1 or not manifest.get("files") or manifest.get("advisories"):
        return None  # (an advisory matched at apply: the full path reports it)
    for pkg in manifest.get("absent", ()):  # installed since apply: an advisory may match now
        if os.path.exists(os.path.join(site, pkg)) or os.path.exists(os.path.join(site, pkg + ".py")):
            return None
    try:
        sources, _ = discover(site, catalogs, cached=manifest.get("entry_points"))
    except (SourceError, OSError, TypeError, ValueError, KeyError, AttributeError):
        return None  # a catalog that cannot be read, or a mangled cache: the full path says which
    if manifest.get("catalog") != digest(sources)[0]:
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


def todo_notes(manifest: dict) -> list[str]:
    """The patches whose documentation still reads TODO (recorded by apply, for the fast path)."""
    return [f"{pid}: {', '.join(fields)} still TODO" for pid, fields in sorted(manifest.get("todo", {}).items())]


def default_site() -> str:
    import sysconfig  # noqa: PLC0415

    return sysconfig.get_paths()["purelib"]
