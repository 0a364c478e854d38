"""Hidden-state backends behind one small interface.

A backend is built from :class:`BackendOptions`, runs batches of ``(line index, token ids)``
and yields ``(line index, [Tensor[T, H] per layer id])`` following the capture convention of
:mod:`eagle3_runner.common.layers`.  ``extract`` does everything else (resume, validation, atomic
writes, progress).  To add one (e.g. a worker-extension backend that writes files inside the
vLLM worker), subclass :class:`Backend` and add a ``"name": "module:Class"`` entry to
:data:`BACKENDS`; modules are imported only when their backend is chosen.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...common.errors import UsageError

BACKENDS: dict[str, str] = {
    "vllm": "eagle3_runner.extract.backends.speculators_vllm:SpeculatorsVllmBackend",
    "hf": "eagle3_runner.extract.backends.hf:HFBackend",
}

DTYPES = ("auto", "bfloat16", "float32")


@dataclass(frozen=True)
class BackendOptions:
    model: Path
    layer_ids: tuple[int, ...]
    dtype: str = "auto"  # one of DTYPES
    max_model_len: int = 2048
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.3
    site_packages: str | None = None  # where speculators lives (vllm backend)


class Backend(ABC):
    """One hidden-state engine; use as a context manager."""

    name: ClassVar[str]

    def __init__(self, options: BackendOptions) -> None:
        self.options = options

    @property
    @abstractmethod
    def ran_dtype(self) -> str:
        """The dtype the engine actually computes in (e.g. ``"bfloat16"``)."""

    @abstractmethod
    def run(self, batch: Sequence[tuple[int, list[int]]]) -> Iterator[tuple[int, list[Any]]]:
        """Yield ``(index, hidden_states)`` for every item of ``batch`` (any order)."""

    def info(self) -> dict[str, Any]:
        """Versions and settings recorded in ``data_config.json``."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional
        pass

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def backend_class(name: str) -> type[Backend]:
    try:
        module, _, cls = BACKENDS[name].partition(":")
    except KeyError:
        raise UsageError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}") from None
    return getattr(importlib.import_module(module), cls)


def torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float32": torch.float32}[name]


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
