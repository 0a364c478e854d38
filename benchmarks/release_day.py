#!/usr/bin/env python3
"""Release-day timings: ``check --against`` with a warm wheel cache (goal <= 60 s) and ``prove``
(goal <= 5 min on 2 cores), on a real site: speculators 0.4.0 (wheel) + the installed vLLM.

    .venv/bin/python benchmarks/release_day.py [--against vllm==0.34.0] [--runs 3] [--no-prove]

``prove`` runs twice: with an empty model cache (the tiny models are built) and again (cached).
Writes benchmarks/results/release-day-<date>.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import upstream  # noqa: E402


def cli(*args: str, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllm_compat", *args], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=1800)
    return time.monotonic() - t0, proc


def build_site(root: Path) -> Path:
    site = root / "site-packages"
    upstream.unpack(upstream.wheel("speculators", "0.4.0"), site)
    if not upstream.link_installed_vllm(site):
        raise SystemExit("release_day: vLLM is not installed here")
    return site


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", default="vllm==0.34.0")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-prove", action="store_true")
    args = p.parse_args()
    out: dict = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
                 "load_avg_at_start": os.getloadavg()[0], "against": args.against}
    with tempfile.TemporaryDirectory() as tmp:
        site = build_site(Path(tmp))
        _, proc = cli("apply", "--site-packages", str(site))
        assert proc.returncode == 0, proc.stderr
        name, version = args.against.split("==")
        (upstream.vllm_wheel(version) if name.startswith("vllm") else upstream.wheel(name, version))  # warm cache
        times = []
        for _ in range(args.runs):
            s, proc = cli("check", "--site-packages", str(site), "--against", args.against)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            times.append(round(s, 2))
        out["check_against_s"] = {"runs": times, "median": statistics.median(times), "goal": 60}
        if not args.no_prove:
            env = {"VLLM_COMPAT_KEY_FILE": str(Path(tmp) / "key"), "VLLM_COMPAT_CACHE": str(Path(tmp) / "cache"),
                   "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
            for label in ("prove_cold_s", "prove_warm_s"):
                s, proc = cli("prove", "--site-packages", str(site), "--json", env=env)
                assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
                res = json.loads(proc.stdout)
                out[label] = {"wall": round(s, 1), "goal": 300,
                              "per_arch": {a: r.get("seconds") for a, r in res["results"].items()},
                              "worst": {a: r.get("worst") for a, r in res["results"].items()}}
        out["vllm_dist"] = next(p.name for p in site.iterdir() if p.name.startswith("vllm") and
                                p.name.endswith(".dist-info"))
    dest = REPO / "benchmarks" / "results" / f"release-day-{out['date'][:10]}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
