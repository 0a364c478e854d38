"""One generation engine (vLLM's ``LLM``) shared by the steps that generate: synthesis and regenerate.

Built on first use, so a run whose every row is already in its side files starts no engine, and
shared, so ``prepare --synthesize`` writes the user turns and answers them with one engine start.
Float32 on CPU when the model is float32 and ``dtype`` is ``auto`` (vLLM's CPU build would run it
in bfloat16); ``gpu_memory_utilization`` 0.8 on GPUs and 0.3 on CPU by default.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.environment import default_memory_share, engine_in_process, load_model_config, release_in_process_engine

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineOptions:
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    seed: int = 0
    enforce_eager: bool | None = None  # None: eager on the CPU build (it has no CUDA graphs), vLLM's default on GPUs


def engine_dtype(requested: str, config: Any, on_cpu: bool) -> str:
    """``auto`` means float32 for a float32 model on CPU (vLLM's CPU build would pick bfloat16)."""
    if requested != "auto" or not on_cpu:
        return requested
    have = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return "float32" if str(have).removeprefix("torch.") == "float32" else requested


def capped_model_len(model: Path, want: int) -> int:
    """``want`` rounded up to 32, at most the model's ``max_position_embeddings``."""
    want = -(-want // 32) * 32
    cap = getattr(load_model_config(model), "max_position_embeddings", None)
    return min(want, int(cap)) if cap else want


class LazyEngine:
    """``get()`` builds the engine once; ``dtype`` is what it ran in (``None`` until built)."""

    def __init__(self, model: Path, options: EngineOptions, max_model_len: int) -> None:
        self.model, self.options, self.max_model_len = Path(model), options, max_model_len
        self.llm: Any = None
        self.dtype: str | None = None
        self.in_process = False  # the engine runs in this process (:func:`engine_in_process`)

    def get(self) -> Any:
        if self.llm is None:
            o = self.options
            share = o.gpu_memory_utilization or default_memory_share()  # sets torch's NVML-based CUDA check
            import torch

            on_cpu = not torch.cuda.is_available()
            dtype = engine_dtype(o.dtype, load_model_config(self.model), on_cpu)
            from vllm import LLM

            logger.info("starting vLLM on %s (max_model_len %d, dtype %s)", self.model, self.max_model_len, dtype)
            with engine_in_process(self.model) as self.in_process:
                self.llm = LLM(model=str(self.model), dtype=dtype, max_model_len=self.max_model_len,
                               tensor_parallel_size=o.tensor_parallel_size, gpu_memory_utilization=share,
                               enforce_eager=on_cpu if o.enforce_eager is None else o.enforce_eager,
                               seed=o.seed)
            self.dtype = str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")
        return self.llm

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is not None and self.in_process:
            release_in_process_engine(llm)
