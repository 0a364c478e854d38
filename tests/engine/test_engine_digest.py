"""Upgrading vllm-compat to a release whose transform semantics changed marks the sites
patched by the old engine `pending` (the digest covers the engine, not only `patches/`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import enginekit as kit
from enginekit import cli, show


def release(tmp_path: Path, name: str, change: str | None) -> Path:
    """A copy of this checkout's vllm_compat and catalog as another release would install
    them; ``change`` is appended to one module of its ``transform/`` package (not ``__init__``)."""
    root = tmp_path / name
    for pkg in ("vllm_compat", "patches"):
        shutil.copytree(kit.REPO / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    if change is not None:
        target = root / "vllm_compat" / "transform" / "statements.py"
        target.write_text(target.read_text() + change)
    return root


def test_a_new_engine_marks_patched_sites_pending(patched: Path, tmp_path: Path) -> None:
    old, new = release(tmp_path, "old", None), release(tmp_path, "new", "\n# a release that changed how edits are carried out\n")
    assert cli(patched, "verify", cwd=old).returncode == 0  # the same engine: still applied
    ver = cli(patched, "verify", cwd=new)
    assert ver.returncode == 10, show(ver)
    assert "vllm-compat's engine (patch.py, transform) changed since apply" in ver.stdout, show(ver)
    res = cli(patched, "apply", cwd=new)
    assert res.returncode == 0, show(res)
    assert cli(patched, "verify", cwd=new).returncode == 0
    assert cli(patched, "verify", cwd=old).returncode == 10  # and back again


def test_a_catalog_change_alone_says_so(patched: Path, tmp_path: Path) -> None:
    changed = release(tmp_path, "changed", None)
    module = changed / "patches" / "speculators" / "warm_up.py"
    module.write_text(module.read_text() + "\n# reworded\n")
    ver = cli(patched, "verify", cwd=changed)
    assert ver.returncode == 10 and "catalog built-in changed since apply" in ver.stdout, show(ver)
