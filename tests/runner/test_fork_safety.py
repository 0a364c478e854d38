"""``eagle3 extract`` must not touch the CUDA driver before vLLM forks its processes.

On a GPU, vLLM forks its EngineCore and workers unless CUDA is already initialised; torch's
default availability check (``cudaGetDeviceCount``) initialises the driver without setting
``torch.cuda.is_initialized()``, so the forked processes die with "Cannot re-initialize CUDA in
forked subprocess".  That is how the CLI failed on the H200 while the same engine built from a
script (which imported vLLM first, and with it vLLM's switch to the NVML-based check) ran.
The CPU build of torch never reaches the driver, so this test records, in a fresh process, every
CUDA query the CLI's path makes up to the engine while the NVML check is off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

PROBE = r"""
import json, os, sys, traceback
import torch

early = []

def record(name, f):
    def wrapped(*a, **k):
        if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") != "1":
            early.append(name + ": " + " <- ".join(
                f"{fr.filename.rsplit('/', 1)[-1]}:{fr.lineno}" for fr in traceback.extract_stack()[-6:-1]))
        return f(*a, **k)
    return wrapped

for name in ("is_available", "device_count", "_lazy_init", "init", "current_device", "mem_get_info"):
    setattr(torch.cuda, name, record(name, getattr(torch.cuda, name)))

class EngineReached(Exception):
    pass

def engine(*a, **k):
    raise EngineReached

# the boundaries: from here on vLLM is imported, built, and forks
from eagle3_runner.extract.backends import speculators_vllm, vllm_fast
vllm_fast.make_llm = engine
speculators_vllm.SpeculatorsVllmBackend.__init__ = engine
from eagle3_runner.cli import main
try:
    rc = main(sys.argv[1:])
except EngineReached:
    rc = "engine"
print("PROBE " + json.dumps({"rc": rc, "early": early}))
"""


@pytest.mark.parametrize("backend", ["vllm-fast", "vllm"])
def test_extract_reaches_the_engine_without_a_driver_query(backend: str, request: pytest.FixtureRequest,
                                                           tiny_llama: Path, small_tokens: Path, tmp_path: Path) -> None:
    extra = ["--site-packages", str(request.getfixturevalue("patched_site"))] if backend == "vllm" else []
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    p = subprocess.run(
        [sys.executable, "-c", PROBE, "extract", "--model", str(tiny_llama), "--input", str(small_tokens),
         "--output", str(tmp_path / "out"), "--backend", backend, *extra],
        capture_output=True, text=True, env=env, timeout=300,
    )
    line = next((x for x in p.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, p.stdout[-2000:] + p.stderr[-3000:]
    got = json.loads(line[len("PROBE "):])
    assert got["rc"] == "engine", got  # the probe really got as far as building the engine
    assert got["early"] == [], "CUDA queried before vLLM's fork with torch's driver check:\n" + "\n".join(got["early"])
