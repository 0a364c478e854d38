"""Fixtures of the runtime proof: patched speculators sites, tiny models, one generator run per
(speculators version, model), and HF transformers references (the parts live in ``kit.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kit import *  # noqa: E402,F401,F403 - the tests import the kit's names from here
from kit import patched_site, SPECULATORS  # noqa: E402


@pytest.fixture(scope="session")
def e2e_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def tiny_models(e2e_root) -> dict[str, Path]:
    from eagle3_runner.tiny import build_tiny_deepseek_v2, build_tiny_llama

    return {
        "llama": build_tiny_llama(e2e_root / "tiny-llama", seed=0),
        "deepseek_v2": build_tiny_deepseek_v2(e2e_root / "tiny-deepseek-v2", seed=0),
    }


@pytest.fixture(scope="session")
def sites(e2e_root) -> dict[str, tuple[Path, list[str]]]:
    return {v: patched_site(e2e_root, v) for v in SPECULATORS}


