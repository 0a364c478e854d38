"""serve-check's prefix-caching choice (``serve_check._prefix_caching``): off only where a draft is
served on a hybrid verifier by a vLLM without Triton (the CPU build), whose align-mode mamba cache
would pre-copy the recurrent states with a Triton kernel; vLLM's default everywhere else."""

from __future__ import annotations

import pytest

from eagle3_runner.evaluate.serve_check import (
    HYBRID_WITHOUT_TRITON,
    ServeRequest,
    _prefix_caching,
)

vllm = pytest.importorskip("vllm")


def _req(verifier, draft="draft", prefix_caching=None) -> ServeRequest:
    return ServeRequest(str(verifier), draft, [[1, 2, 3]], [4], 3, 256, "bfloat16", prefix_caching)


@pytest.fixture(scope="module")
def verifiers(tmp_path_factory):
    from eagle3_runner.tiny.arch import build

    root = tmp_path_factory.mktemp("verifiers")
    return {name: build(name, root / name, seed=0) for name in ("qwen3", "qwen3_next")}


def _has_triton() -> bool:
    from vllm.triton_utils import HAS_TRITON

    return bool(HAS_TRITON)


def test_a_hybrid_with_a_draft_on_a_vllm_without_triton_serves_without_prefix_caching(verifiers):
    if _has_triton():
        pytest.skip("this vLLM has Triton: align mode's pre-copy kernel runs, prefix caching stays vLLM's default")
    assert _prefix_caching(_req(verifiers["qwen3_next"])) == (False, HYBRID_WITHOUT_TRITON)


def test_everything_else_keeps_vllms_default_or_the_users_choice(verifiers):
    assert _prefix_caching(_req(verifiers["qwen3"])) == (None, None)  # not a hybrid
    assert _prefix_caching(_req(verifiers["qwen3_next"], draft=None)) == (None, None)  # the reference engine
    for choice in (True, False):
        assert _prefix_caching(_req(verifiers["qwen3_next"], prefix_caching=choice)) == (choice, None)
