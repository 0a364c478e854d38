"""``benchmarks/gpu_children.py``: a GPU benchmark's children end with its budget, their own
children (vLLM's EngineCore and workers) with them, and a failed child's stderr is kept."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import gpu_children  # noqa: E402


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_budget_end_kills_the_child_and_its_process_group(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_children, "DEADLINE", time.monotonic() + 1.5)
    pidfile = tmp_path / "grandchild.pid"
    t = time.monotonic()
    p = gpu_children.run_child(["bash", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    assert time.monotonic() - t < 10 and p.returncode != 0
    assert "the budget ended" in p.stderr
    grandchild = int(pidfile.read_text())
    for _ in range(50):  # SIGKILLed; reaped by whoever adopts it
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)
    assert not gpu_children.CHILDREN


def test_a_child_within_the_budget_returns_its_output(monkeypatch):
    monkeypatch.setattr(gpu_children, "DEADLINE", time.monotonic() + 60)
    p = gpu_children.run_child([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (p.returncode, p.stdout, p.stderr) == (3, "out\n", "err\n")


def test_failures_are_appended_to_one_file(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_children, "FAILURES", tmp_path / "failures.txt")
    gpu_children.note_failure("first", "trace 1")
    gpu_children.note_failure("second", "trace 2")
    text = (tmp_path / "failures.txt").read_text()
    assert text.index("first") < text.index("trace 1") < text.index("second") < text.index("trace 2")
    assert os.listdir(tmp_path) == ["failures.txt"]


def test_children_run_at_once_and_each_keeps_its_output(monkeypatch):
    monkeypatch.setattr(gpu_children, "DEADLINE", time.monotonic() + 60)
    code = "import sys, time; time.sleep(1); print('out%s'); print('x' * 200000, file=sys.stderr); sys.exit(%s)"
    t = time.monotonic()
    done = gpu_children.run_children([[sys.executable, "-c", code % (i, i)] for i in range(3)])
    assert time.monotonic() - t < 2.9  # together, not one after another (3 x 1 s)
    assert [(p.returncode, p.stdout) for p in done] == [(0, "out0\n"), (1, "out1\n"), (2, "out2\n")]
    assert all(len(p.stderr) == 200001 for p in done)  # a full pipe never blocked a child


def test_the_first_traceback_is_found_in_a_workers_prefixed_log():
    from benchmarks.extract_cli import first_traceback

    log = ("INFO starting\n(Worker pid=7) ERROR WorkerProc failed to start.\n"
           "(Worker pid=7) Traceback (most recent call last):\n"
           '(Worker pid=7)   File "gpu_worker.py", line 255, in init_device\n'
           "(Worker pid=7)     torch.accelerator.set_device_index(self.device)\n"
           "(Worker pid=7) RuntimeError: Cannot re-initialize CUDA in forked subprocess\n"
           "Traceback (most recent call last):\n  File \"x\"\nValueError: later\n")
    tb = first_traceback(log)
    assert tb.splitlines()[0].endswith("Traceback (most recent call last):")
    assert tb.splitlines()[-1].endswith("RuntimeError: Cannot re-initialize CUDA in forked subprocess")
    assert first_traceback("no error here") is None
