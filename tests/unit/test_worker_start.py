"""The decision of the vendored ``speculators/_vllm_compat_worker_start.py`` (catalog patch
``speculators.worker_start``): spawn when a forked child would be in torch's bad-fork state, and
``OMP_NUM_THREADS`` set on CUDA platforms; a caller's own settings are kept."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SHIM = Path(__file__).resolve().parents[2] / "patches" / "shims" / "worker_start.py"


def _shim():
    spec = importlib.util.spec_from_file_location("worker_start_shim", SHIM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_spawn_only_for_a_poisoned_fork_and_threads_only_on_cuda():
    s = _shim().start_settings
    assert s({}, poisoned=True, cuda=True, cpus=16, workers=1) == {
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn", "OMP_NUM_THREADS": "16"}
    assert s({}, poisoned=False, cuda=True, cpus=16, workers=4) == {"OMP_NUM_THREADS": "4"}
    assert s({}, poisoned=False, cuda=True, cpus=2, workers=8) == {"OMP_NUM_THREADS": "1"}
    assert s({}, poisoned=False, cuda=False, cpus=16, workers=1) == {}
    # what the caller set stays: a chosen start method, a chosen thread count
    caller = {"VLLM_WORKER_MULTIPROC_METHOD": "fork", "OMP_NUM_THREADS": "3"}
    assert s(caller, poisoned=True, cuda=True, cpus=16, workers=1) == {}


def test_the_fork_probe_is_clean_in_a_process_that_asked_cuda_nothing():
    # a CPU build has no bad-fork flag at all; a CUDA build answers False until the default CUDA
    # query ran in this process (the GPU check is benchmarks/gpu_cli.py's gen8 step)
    assert _shim().fork_is_poisoned() is False
