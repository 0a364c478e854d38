"""The transformers backend: the model's own forward with hooks on its decoder layers.

For machines without vLLM, and as the reference the vLLM backend is tested against.  Layer id
``i < N`` is recorded by a forward pre-hook on decoder layer ``i`` (its input); id ``N`` by a
forward hook on the last decoder layer (its output, before the final norm).  Sequences run one
at a time (no padding, so states are exactly the unpadded ones).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from ...common.errors import EnvironmentProblem
from ...common.layers import num_layers
from . import Backend, BackendOptions, dtype_name, torch_dtype

logger = logging.getLogger(__name__)


def base_model(model: Any) -> Any:
    """The decoder stack (the module holding ``layers``) of a causal LM."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    if not hasattr(base, "layers"):
        base = getattr(base, "language_model", base)
    if not hasattr(base, "layers"):
        raise EnvironmentProblem(f"cannot find the decoder layers of {type(model).__name__}")
    return base


def _first_tensor(x: Any) -> Any:
    return x[0] if isinstance(x, (tuple, list)) else x


class HFBackend(Backend):
    name = "hf"

    def __init__(self, options: BackendOptions) -> None:
        super().__init__(options)
        import torch
        from transformers import AutoModelForCausalLM

        kw: dict[str, Any] = {"dtype": "auto" if options.dtype == "auto" else torch_dtype(options.dtype)}
        try:
            self.model = AutoModelForCausalLM.from_pretrained(str(options.model), **kw)
        except (OSError, ValueError) as exc:
            raise EnvironmentProblem(f"cannot load {options.model} with transformers: {exc}") from None
        self.model.eval()
        self.n = num_layers(self.model.config)
        self.base = base_model(self.model)
        self.layers = self.base.layers
        self._captured: dict[int, Any] = {}
        self._handles = []
        for lid in options.layer_ids:
            if lid < self.n:
                self._handles.append(self.layers[lid].register_forward_pre_hook(self._pre_hook(lid), with_kwargs=True))
            else:
                self._handles.append(self.layers[self.n - 1].register_forward_hook(self._post_hook(lid)))
        self._torch = torch

    def _pre_hook(self, lid: int):
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            h = args[0] if args else kwargs["hidden_states"]
            self._captured[lid] = h.detach()
        return hook

    def _post_hook(self, lid: int):
        def hook(module: Any, args: tuple, output: Any) -> None:
            self._captured[lid] = _first_tensor(output).detach()
        return hook

    @property
    def ran_dtype(self) -> str:
        return dtype_name(self.model.dtype)

    def run(self, batch: Sequence[tuple[int, list[int]]]) -> Iterator[tuple[int, list[Any]]]:
        torch = self._torch
        for index, ids in batch:
            self._captured.clear()
            with torch.inference_mode():
                self.base(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
            yield index, [self._captured[lid][0].clone() for lid in self.options.layer_ids]

    def info(self) -> dict[str, Any]:
        import transformers

        return {"transformers": transformers.__version__}

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
