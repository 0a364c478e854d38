"""``eagle3 run --tiny --arch NAME`` per architecture of ``eagle3_runner.tiny.arch``: the whole
pipeline on that verifier (its own chat template), ending with vLLM serving the draft, whose
acceptance must agree with the offline prediction within 5 points (checked by the run itself,
and here again) with outputs unchanged by the draft.

Minutes per architecture on the CPU: part of the full sweep only (``EAGLE3_ARCH_SWEEP=1``,
``scripts/arch_sweep.py -k`` does not run these; ``pytest tests/runner/test_run_arch.py`` does).
"""

from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.environ.get("EAGLE3_ARCH_SWEEP") != "1",
                                                   reason="full architecture sweep only (EAGLE3_ARCH_SWEEP=1)")]

TOLERANCE = 0.05


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe", "gpt_oss", "qwen3_next"])
def test_tiny_run_serves_as_predicted(tmp_path, train_site, run_cli, arch):
    proc = run_cli("run", "--tiny", "--arch", arch, "--workdir", str(tmp_path), env={"PYTHONPATH": str(train_site)},
                   timeout=3000)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    offline = json.loads((tmp_path / "checkpoint" / "eval.json").read_text())
    served = json.loads((tmp_path / "serve_check.json").read_text())
    gap = max(abs(a - b) for a, b in zip(served["acceptance_per_position"], offline["acceptance_per_position"],
                                         strict=True))
    print(json.dumps({"arch": arch, "offline": offline["acceptance_per_position"],
                      "served": served["acceptance_per_position"], "gap": gap}))
    assert served["outputs_equal_reference"] is True
    assert gap <= TOLERANCE
