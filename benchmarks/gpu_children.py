"""Child processes of the GPU benchmarks under one deadline: each in its own process group
(with the EngineCore and workers it starts), killed when the budget ends or on SIGTERM, the
whole stderr of a failed one appended to one file; and the wait for the GPU between engines."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from benchmarks.gpu_models import DRY

FAILURES: Path | None = None  # failed children's whole stderr, appended ($OUT/failures.txt)
DEADLINE = float("inf")  # time.monotonic() at which every child is killed
CHILDREN: set[int] = set()  # process groups of running children (each its own session)


def start(budget_s: float, failures: Path) -> None:
    """Children from now on end within ``budget_s``; SIGTERM (``timeout``) kills them too."""
    global FAILURES, DEADLINE
    FAILURES, DEADLINE = failures, time.monotonic() + budget_s
    signal.signal(signal.SIGTERM, _on_sigterm)


def left_s() -> float:
    return DEADLINE - time.monotonic()


def run_child(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` in its own process group, killed with its engine processes when the
    budget ends (a vLLM EngineCore outliving its driver would hold the GPU)."""
    return run_children([cmd], **kwargs)[0]


def run_children(cmds: list[list[str]], **kwargs) -> list[subprocess.CompletedProcess]:
    """:func:`run_child` for several commands at once (their output goes to files, so that none
    blocks on a full pipe while another is waited for)."""
    import tempfile

    procs = []
    with tempfile.TemporaryDirectory(prefix="children-") as tmp:
        for i, cmd in enumerate(cmds):
            out, err = open(f"{tmp}/{i}.out", "w+"), open(f"{tmp}/{i}.err", "w+")
            p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, start_new_session=True, **kwargs)
            CHILDREN.add(p.pid)
            procs.append((cmd, p, out, err))
        done = []
        for cmd, p, out, err in procs:
            note = ""
            try:
                p.wait(timeout=max(1.0, left_s()))
            except subprocess.TimeoutExpired:
                note = f"\n[gpu_children] killed: the budget ended ({cmd[1:4]})\n"
            finally:
                kill_group(p.pid)
                p.wait()
                CHILDREN.discard(p.pid)
            out.seek(0)
            err.seek(0)
            done.append(subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read() + note))
            out.close()
            err.close()
    return done


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def note_failure(what: str, stderr: str) -> None:
    if FAILURES is not None:
        with open(FAILURES, "a") as fh:
            fh.write(f"===== {what} ({time.strftime('%H:%M:%S')}) =====\n{stderr[-200_000:]}\n")


def wait_gpu_free(share: float = 0.95, timeout: float = 30.0) -> float:
    """Back-to-back engines: the last one's processes may still be releasing GPU memory after
    its driver exited; a new engine asking for 80% of the GPU then fails, and one whose memory
    profiling sees memory freed under it fails vLLM's profiling check.  Wait until the free
    memory is high and has not changed for a second."""
    if DRY:
        return 0.0
    t, last = time.perf_counter(), -1
    while time.perf_counter() - t < min(timeout, left_s()):
        import torch

        free, total = torch.cuda.mem_get_info()
        if free >= share * total and free == last:
            break
        last = free
        time.sleep(1.0)
    return time.perf_counter() - t


def _on_sigterm(signum, frame) -> None:
    for pgid in list(CHILDREN):
        kill_group(pgid)
    raise SystemExit(128 + signum)
