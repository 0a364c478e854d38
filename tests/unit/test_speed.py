"""``serve-check --speed``'s arithmetic and its command line (the engines are run by the tiny e2e
test, tests/runner/test_acceptance_e2e.py): medians, the speed-up, acceptance from vLLM's counters,
tokens per engine step, the verdict, the note on vLLM releases measured slow, bad flags."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eagle3_runner.evaluate.speed import combine, verdict, version_note


def _run(seconds: float, tokens: int, steps: int, drafts: int = 0, accepted: int = 0, outputs=None) -> dict:  # noqa: ANN001
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "steps": steps,
            "ms_per_step": 1e3 * seconds / steps, "drafts": drafts, "draft_tokens": 3 * drafts,
            "accepted_tokens": accepted, "outputs": outputs or [[1, 2, 3]]}


def test_combine_takes_medians_and_acceptance_from_the_counters():
    alone = {"batches": {"1": [_run(2.0, 100, 100), _run(2.2, 100, 100), _run(9.0, 100, 100)]}}
    draft = {"batches": {"1": [_run(1.0, 100, 40, 40, 60), _run(1.1, 100, 40, 40, 60), _run(0.5, 100, 40, 40, 60)]}}
    row = combine(alone, draft, [1])["1"]
    assert row["tokens_per_s_verifier"] == pytest.approx(100 / 2.2)  # the median, not the mean (9.0 is an outlier)
    assert row["tokens_per_s_with_draft"] == pytest.approx(100 / 1.0)
    assert row["speedup"] == pytest.approx(2.2)
    assert row["mean_acceptance_length"] == pytest.approx(1 + 180 / 120)
    assert row["ms_per_step_verifier"] == pytest.approx(22.0) and row["ms_per_step_with_draft"] == pytest.approx(25.0)
    assert row["tokens_per_step_with_draft"] == pytest.approx(2.5) and row["repeats"] == 3
    assert row["outputs_equal"] is True and "outputs" not in row["runs"]["with_draft"][0]


def test_outputs_that_differ_are_reported():
    alone = {"batches": {"8": [_run(1, 10, 10, outputs=[[1, 2]]), _run(1, 10, 10)]}}
    draft = {"batches": {"8": [_run(1, 10, 5, 5, 5, outputs=[[1, 3]]), _run(1, 10, 5, 5, 5)]}}
    assert combine(alone, draft, [8])["8"]["outputs_equal"] is False


def test_verdict_names_every_batch_and_labels_a_cpu_figure():
    rows = {"1": {"speedup": 1.416}, "8": {"speedup": 0.9}}
    assert verdict(rows, "NVIDIA H100 80GB HBM3", False) == \
        "the draft makes serving 1.42x as fast at batch 1, 0.90x at batch 8 (NVIDIA H100 80GB HBM3)"
    assert "a CPU figure" in verdict(rows, "CPU (x86_64, 2 cores)", True)


@pytest.mark.parametrize("version, cpu, noted", [("0.20.0", False, True), ("0.25.1", False, True),
                                                 ("0.26.0", False, False), ("0.32.0", False, False),
                                                 ("0.20.0", True, False), (None, False, False),
                                                 ("0.20.0+cu130", False, True), ("dev", False, False)])
def test_the_note_names_vllm_releases_measured_slow_on_a_gpu(version, cpu, noted):
    note = version_note(version, cpu)
    assert (note is not None) == noted
    if noted:
        assert version in note and "0.26" in note and "docs/serving-speed.md" in note


@pytest.mark.parametrize("flags, words", [(["--batch-sizes", "0,8"], "positive integers"),
                                          (["--batch-sizes", "one"], "positive integers"),
                                          (["--repeats", "1"], ">= 2")])
def test_bad_speed_flags_exit_2_with_one_line(tmp_path, flags, words):
    proc = subprocess.run([sys.executable, "-m", "eagle3_runner", "serve-check", "--draft", str(tmp_path), "--speed",
                           *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
