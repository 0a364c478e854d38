"""Hidden-state capture for speculators' offline EAGLE-3 generator (vendored by vllm-compat).

This module is copied into the patched ``speculators`` package as
``speculators/_vllm_compat_capture.py``; patched code imports it from there and never imports
``vllm_compat``.

What is captured (a deliberate correction of upstream, see the ``capture_hooks`` patch):

* layer id ``i`` with ``0 <= i < N`` (``N = num_hidden_layers``): the residual stream ENTERING
  decoder layer ``i``, i.e. ``hidden_states + residual`` as passed to layer ``i`` (for the
  first layer ``residual`` is ``None`` and the stream is just ``hidden_states``, the
  embeddings).  This is what vLLM's EAGLE-3 serving path feeds the draft model
  (``aux_hidden_state_layers`` in ``vllm/model_executor/models/llama.py`` records
  ``hidden_states + residual`` before calling layer ``i``).
* layer id ``N``: the output of the last decoder layer before the final norm
  (``hidden_states + residual`` returned by layer ``N - 1``).

How: forward pre-hooks on the decoder layers (a forward hook on the last layer for id ``N``),
so the model's own forward runs unchanged on every architecture and every vLLM release (no
copied model forward that drifts: DeepseekV2's ``llama_4_scaling`` from vLLM 0.12.0, its
sequence-parallel MoE all-gather from 0.25.0, ``**extra_layer_kwargs`` from 0.15.0).

Per-request attribution: the worker's ``execute_model`` is wrapped; hooks only record while a
real scheduler step runs (never during profiling or warm-up dummy runs).  After each step
the captured rows are split per request using the runner's own layout of that step: Model
Runner V2 (vLLM >= 0.22, no ``input_batch``) keeps the step's ``InputBatch`` (``req_ids`` and
``query_start_loc_np``) in ``execute_model_state``; the V1 runner lays requests out in
``input_batch.req_ids`` order with ``scheduler_output.num_scheduled_tokens`` tokens each.
Chunks of one request across steps (chunked prefill) are concatenated in step order.
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

import torch

__all__ = ["HiddenStatesCapture", "num_decoder_layers"]


def _base_model(model: Any) -> Any:
    if hasattr(model, "get_language_model"):
        return model.get_language_model().model
    if hasattr(model, "model") and hasattr(model.model, "layers"):
        return model.model
    raise AttributeError(
        f"Could not find a base model with decoder 'layers' in {type(model).__name__}"
    )


def num_decoder_layers(config: Any) -> int:
    """``num_hidden_layers`` of a (possibly multimodal) HF config."""
    if hasattr(config, "num_hidden_layers"):
        return int(config.num_hidden_layers)
    if hasattr(config, "text_config"):
        return int(config.text_config.num_hidden_layers)
    raise ValueError("Cannot determine num_layers from config")


def _stream(hidden_states: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    # A new tensor either way: layers may update their inputs in place (fused add+norm).
    if residual is None:
        return hidden_states.clone()
    return hidden_states + residual


class HiddenStatesCapture:
    """Records the residual stream at the requested layer ids, per request."""

    def __init__(self, worker: Any, layer_ids: list[int]) -> None:
        from vllm.distributed import get_tp_group

        self.worker = worker
        self.layer_ids = [int(i) for i in layer_ids]
        base = _base_model(worker.model_runner.model)
        layers = base.layers
        n = len(layers)
        for lid in self.layer_ids:
            if lid < 0 or lid > n:
                raise ValueError(f"Layer index {lid} out of bounds [0, {n}]")
        self.num_layers = n
        self.enabled = get_tp_group().rank_in_group == 0
        self.recording = False
        self.step: dict[int, torch.Tensor] = {}
        self.chunks: dict[str, list[list[torch.Tensor]]] = {}
        self.order: list[str] = []
        self.handles: list[Any] = []
        self._signatures: dict[int, inspect.Signature] = {}
        for lid in sorted(set(self.layer_ids)):
            if lid < n:
                layer = layers[lid]
                if type(layer).__name__ == "PPMissingLayer":
                    continue
                self.handles.append(
                    layer.register_forward_pre_hook(
                        partial(self._pre_hook, lid), with_kwargs=True
                    )
                )
            else:
                layer = layers[n - 1]
                if type(layer).__name__ == "PPMissingLayer":
                    continue
                self.handles.append(
                    layer.register_forward_hook(partial(self._post_hook, lid), with_kwargs=True)
                )
        original = worker.execute_model
        self._original_execute_model = original
        worker.execute_model = self._execute_model

    @classmethod
    def install(cls, worker: Any, layer_ids: list[int]) -> "HiddenStatesCapture":
        """Install on ``worker`` (replacing an earlier installation) and return it."""
        previous = getattr(worker, "_vllm_compat_capture", None)
        if previous is not None and hasattr(previous, "close"):
            previous.close()
        capture = cls(worker, layer_ids)
        worker._vllm_compat_capture = capture
        return capture

    def close(self) -> None:
        """Remove the hooks and restore the worker's ``execute_model``."""
        for handle in self.handles:
            handle.remove()
        self.handles = []
        if self.worker.__dict__.get("execute_model") == self._execute_model:
            del self.worker.execute_model

    # -- hooks -------------------------------------------------------------------------------
    def _bind(self, module: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        sig = self._signatures.get(id(module))
        if sig is None:
            sig = self._signatures[id(module)] = inspect.signature(module.forward)
        bound = sig.bind_partial(*args, **kwargs).arguments
        if "hidden_states" in bound:
            return bound["hidden_states"], bound.get("residual")
        return args[1], args[2] if len(args) > 2 else None

    def _pre_hook(self, lid: int, module: Any, args: tuple, kwargs: dict) -> None:
        if self.recording and self.enabled:
            hidden_states, residual = self._bind(module, args, kwargs)
            self.step[lid] = _stream(hidden_states, residual)

    def _post_hook(self, lid: int, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if self.recording and self.enabled:
            if isinstance(output, tuple):
                hidden_states, residual = output[0], output[1] if len(output) > 1 else None
            else:
                hidden_states, residual = output, None
            self.step[lid] = _stream(hidden_states, residual)

    # -- steps -------------------------------------------------------------------------------
    def _execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self.step = {}
        self.recording = True
        try:
            output = self._original_execute_model(scheduler_output, *args, **kwargs)
        finally:
            self.recording = False
        if self.step:
            self._attribute(scheduler_output)
            self.step = {}
        return output

    def _layout(self, scheduler_output: Any) -> list[tuple[str, int, int]]:
        return step_layout(self.worker.model_runner, scheduler_output)

    def _attribute(self, scheduler_output: Any) -> None:
        states = [self.step[lid] for lid in self.layer_ids]
        # speculators 0.4.0 sends, before each step, how many of each request's scheduled
        # tokens are prompt tokens (``_set_request_metadata``); 0.3.0 sends nothing.
        limits = getattr(self.worker, "_current_request_metadata", None)
        for rid, start, n in self._layout(scheduler_output):
            if limits is not None:
                n = min(n, int(limits.get(rid, 0)))
            if n <= 0:
                continue
            per_layer = self.chunks.get(rid)
            if per_layer is None:
                per_layer = self.chunks[rid] = [[] for _ in self.layer_ids]
                self.order.append(rid)
            for k, tensor in enumerate(states):
                per_layer[k].append(tensor[start : start + n])
        if limits is not None:
            self.worker._current_request_metadata = None

    # -- the extension's API -----------------------------------------------------------------
    def reset(self) -> None:
        self.step = {}
        self.chunks = {}
        self.order = []
        if getattr(self.worker, "_current_request_metadata", None) is not None:
            self.worker._current_request_metadata = None

    def collect(self) -> dict[str, list[torch.Tensor]] | None:
        """``{request id: [tensor per layer id]}`` (CPU tensors), then reset; None if empty."""
        if not self.chunks:
            self.reset()
            return None
        result = {
            rid: [torch.cat(parts, dim=0).cpu() for parts in self.chunks[rid]]
            for rid in self.order
        }
        self.reset()
        return result


def step_layout(runner: Any, scheduler_output: Any, batch: Any = None) -> list[tuple[str, int, int]]:
    """``(request id, first row, number of rows)`` of each request in this step's batch, from
    the model runner's own layout (also used by eagle3_runner's fast capture path).

    ``batch``: the step's input batch when the caller kept it; else the runner's."""
    if batch is None:
        state = getattr(runner, "execute_model_state", None)
        batch = getattr(state, "input_batch", None)
    if batch is not None and hasattr(batch, "query_start_loc_np"):
        # Model Runner V2: the step's own InputBatch (requests sorted per step).
        qsl = batch.query_start_loc_np
        return [
            (rid, int(qsl[k]), int(qsl[k + 1]) - int(qsl[k]))
            for k, rid in enumerate(batch.req_ids)
        ]
    # V1 model runner: rows follow the persistent batch order.
    batch = runner.input_batch
    counts = scheduler_output.num_scheduled_tokens
    spans = []
    start = 0
    for rid in batch.req_ids[: batch.num_reqs]:
        if rid is None:
            continue
        n = int(counts.get(rid, 0))
        if n:
            spans.append((rid, start, n))
            start += n
    return spans
