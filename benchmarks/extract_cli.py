"""One ``eagle3 extract`` process, as a user runs it: its own rate and the process's wall time.

Shared by ``cpu_extract.py`` and ``gpu_cli.py``; imports neither torch nor vLLM.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# extract's summary line: "... (layer ids [...], 1.2 samples/s, 12,345 tokens/s)"
RATE = re.compile(r"([\d,]+) tokens/s\)")


def errors_of(text: str) -> list[str]:
    return [x for x in text.splitlines() if re.search(r"Error|error:|Exception|Traceback", x)][:30]


def first_traceback(text: str, lines: int = 40) -> str | None:
    """The first Python traceback in a child's output (a vLLM worker's is prefixed, e.g.
    ``(Worker pid=1) ``), up to its exception line."""
    rows = text.splitlines()
    start = next((i for i, x in enumerate(rows) if "Traceback (most recent call last)" in x), None)
    if start is None:
        return None
    block = []
    for x in rows[start:start + 400]:
        block.append(x)
        body = re.sub(r"^\([^)]*\)\s*", "", x)  # a worker's prefix
        if len(block) > 1 and body and not body.startswith((" ", "Traceback")) and re.match(r"[\w.]+(Error|Exception|Exit)\b|\w+: ", body):
            break
    return "\n".join(block[-lines:])


def run_extract(model: Path, rows: Path, out: Path, backend: str, *extra: str, env: dict | None = None,
                runner: Callable[..., subprocess.CompletedProcess] | None = None) -> dict:
    """``python -m eagle3_runner extract`` on ``rows``; ``tokens_per_s`` is the rate the command
    reports (engine start and shutdown excluded), ``None`` when it failed.  ``runner(cmd, cwd=,
    env=)`` runs it (default ``subprocess.run``, output captured)."""
    cmd = [sys.executable, "-m", "eagle3_runner", "extract", "--model", str(model), "--input", str(rows),
           "--output", str(out), "--backend", backend, *extra]
    t = time.perf_counter()
    if runner is None:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    else:
        p = runner(cmd, cwd=REPO, env=env)
    wall = time.perf_counter() - t
    m = RATE.search(p.stdout)
    res = {"cmd": " ".join(cmd[1:]), "rc": p.returncode, "process_wall_s": wall,
           "tokens_per_s": float(m.group(1).replace(",", "")) if m else None, "stdout": p.stdout[-800:]}
    if p.returncode:
        res["stderr"] = p.stderr[-3000:]
        # vLLM logs to stdout, a worker's traceback too: callers keep both (too long for a summary)
        res["stderr_full"] = f"--- stdout ---\n{p.stdout[-200_000:]}\n--- stderr ---\n{p.stderr[-200_000:]}"
        res["error_lines"] = errors_of(p.stderr + p.stdout)
        res["first_traceback"] = first_traceback(p.stdout + "\n" + p.stderr)
    return res
