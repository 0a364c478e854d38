"""Fixtures of the engine tests: pristine sites built once per session from real wheels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).absolute().parent))

import enginekit as kit  # noqa: E402


@pytest.fixture(scope="session")
def pristine_full(tmp_path_factory) -> Path:
    """speculators 0.3.0 + every Python source of vLLM 0.32.0 (never modified)."""
    return kit.build(tmp_path_factory.mktemp("pristine") / "full", "0.3.0", "0.32.0")


@pytest.fixture(scope="session")
def pristine_lean(tmp_path_factory) -> Path:
    """speculators 0.3.0 + vLLM 0.32.0's dist-info and probed files (never modified)."""
    return kit.build(tmp_path_factory.mktemp("pristine") / "lean", "0.3.0", "0.32.0", lean=True)


@pytest.fixture(scope="session")
def reference(pristine_lean, tmp_path_factory) -> kit.Reference:
    return kit.Reference(pristine_lean, tmp_path_factory.mktemp("reference"))


@pytest.fixture
def full_site(pristine_full, tmp_path) -> Path:
    """A fresh writable copy of the full pristine site."""
    return kit.copy_site(pristine_full, tmp_path / "site-packages")


@pytest.fixture
def site(pristine_lean, tmp_path) -> Path:
    """A fresh writable copy of the lean pristine site."""
    return kit.copy_site(pristine_lean, tmp_path / "site-packages")


@pytest.fixture
def patched(reference, tmp_path) -> Path:
    """A fresh copy of the lean site after one uninterrupted ``apply`` (shared, never modified)."""
    return kit.copy_site(reference.patched_site, tmp_path / "site-packages")
