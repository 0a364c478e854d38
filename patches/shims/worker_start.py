"""Vendored by vllm-compat (catalog patch ``speculators.worker_start``): start the generator's
workers safely, whatever the caller imported or asked torch before.

Two hazards of ``MultiprocExecutor``'s forked workers (seen on an H200, vLLM 0.20.0):

* torch's default CUDA query (``torch.cuda.is_available()`` without the NVML-based check, run for
  example by ``import speculators``: it imports ``torch._inductor``, whose benchmarking module
  asks) poisons later forks without initializing CUDA.  vLLM switches to ``spawn`` only when CUDA
  *is initialized*, so it forks, and the worker dies with "Cannot re-initialize CUDA in forked
  subprocess".  Here a forked probe asks torch whether a child would be in a bad fork; if so the
  start method becomes ``spawn``.
* With ``OMP_NUM_THREADS`` unset, vLLM (GPU platforms) sets torch to one thread in this process
  before it forks: the capture threads in the worker then fail ("Invalid thread pool"), and this
  process, which checks and maps the returned states, is left on one core.  Here
  ``OMP_NUM_THREADS`` is set first, to the cores per worker, so vLLM leaves the pools alone.

A caller's own ``VLLM_WORKER_MULTIPROC_METHOD`` or ``OMP_NUM_THREADS`` is kept.  Once the workers
are up, vLLM (0.32: ``set_torch_threads_for_runtime``, the CPU build too) sets this process to one
thread, since in vLLM's own engine it only schedules; here it also checks and maps every returned
state, so ``restore_driver_threads`` gives it back the threads it had.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

_driver_threads: list[int] = []  # this process's torch threads before the executor was built


def fork_is_poisoned() -> bool:
    """Whether a child forked now would be in torch's "bad fork" state (CUDA unusable there)."""
    import torch

    if not hasattr(torch._C, "_cuda_isInBadFork"):  # a build without CUDA
        return False
    pid = os.fork()
    if pid == 0:  # the child only reads the flag torch's at-fork handler set
        os._exit(3 if torch._C._cuda_isInBadFork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 3


def start_settings(environ: dict, *, poisoned: bool, cuda: bool, cpus: int, workers: int) -> dict:
    """The environment variables to set (none that the caller set)."""
    out = {}
    if poisoned and "VLLM_WORKER_MULTIPROC_METHOD" not in environ:
        out["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    if cuda and "OMP_NUM_THREADS" not in environ:
        out["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, workers)))
    return out


def prepare_worker_start(vllm_config):
    """Set the start method and thread settings for ``MultiprocExecutor(vllm_config)``; returns
    ``vllm_config`` unchanged (the patch wraps the executor's argument)."""
    import torch
    from vllm.platforms import current_platform

    _driver_threads[:] = [torch.get_num_threads()]
    cuda = current_platform.is_cuda_alike()
    workers = int(getattr(vllm_config.parallel_config, "world_size", 1) or 1)
    settings = start_settings(os.environ, poisoned=cuda and fork_is_poisoned(), cuda=cuda,
                              cpus=os.cpu_count() or 1, workers=workers)
    if settings:
        logger.info("worker start: %s", ", ".join(f"{k}={v}" for k, v in settings.items()))
        os.environ.update(settings)
    return vllm_config


def restore_driver_threads() -> None:
    """Give this process back the torch threads it had before the executor was built."""
    import torch

    if _driver_threads and torch.get_num_threads() < _driver_threads[0]:
        logger.info("worker start: torch threads back from %d to %d", torch.get_num_threads(), _driver_threads[0])
        torch.set_num_threads(_driver_threads[0])
