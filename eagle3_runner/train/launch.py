"""Run ``eagle3 train`` in several processes under ``torchrun`` (FSDP)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import fields

from ..common.errors import ExitCode, RunnerError
from . import TrainOptions

logger = logging.getLogger(__name__)

LAUNCHED = "EAGLE3_LAUNCHED_BY_TORCHRUN"


NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

def train_args(opts: TrainOptions) -> list[str]:
    """``eagle3 train`` arguments that reproduce ``opts``."""
    args = ["train"]
    for f in fields(opts):
        value = getattr(opts, f.name)
        flag = "--" + f.name.replace("_", "-")
        if value is None:  # the flag's own default (None) is what the ranks get without it
            continue
        if isinstance(value, bool):
            if value:
                args.append(flag)
        else:
            args += [flag, str(value)]
    return args


def torchrun_train(opts: TrainOptions, nproc: int) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "eagle3_runner", *train_args(opts)]
    logger.info("launching %s", " ".join(cmd))
    env = dict(os.environ)
    env[LAUNCHED] = "1"  # the ranks leave the printing to this process
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    # NVLink multicast stays off in every rank (it can take a shared host's GPUs down);
    # setdefault: an explicit choice by the user wins.
    for name, value in NO_MULTICAST.items():
        env.setdefault(name, value)
    rc = subprocess.call(cmd, env=env)
    if rc != 0:
        code = ExitCode(rc) if rc in ExitCode._value2member_map_ else ExitCode.ENVIRONMENT
        raise RunnerError(f"torchrun training with {nproc} processes failed (exit {rc})", code)
