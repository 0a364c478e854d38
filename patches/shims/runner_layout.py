"""Where a vLLM model runner puts each request's rows in one step's batch.

Vendored as ``speculators/_vllm_compat_runner_layout.py`` beside ``_vllm_compat_capture``
(the ``speculators.capture_hooks`` patch).  The part of the capture that follows vLLM's model
runners: a new runner, or a new scheduler-output field, changes this module only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["base_model", "computed_tokens", "step_layout"]


def base_model(model: Any) -> Any:
    if hasattr(model, "get_language_model"):
        lm = model.get_language_model()
        if hasattr(lm, "model") and hasattr(lm.model, "layers"):
            return lm.model
    if hasattr(model, "model") and hasattr(model.model, "layers"):
        return model.model
    raise AttributeError(f"Could not find a base model with decoder 'layers' in {type(model).__name__}")


def step_layout(runner: Any, scheduler_output: Any, batch: Any = None) -> list[tuple[str, int, int]]:
    """``(request id, first row, number of rows)`` of each request in this step's batch, from
    the model runner's own layout.  ``batch``: the step's input batch when the caller kept it."""
    if batch is None:
        batch = getattr(getattr(runner, "execute_model_state", None), "input_batch", None)
    if batch is not None and hasattr(batch, "query_start_loc_np"):
        qsl = batch.query_start_loc_np  # Model Runner V2: the step's own (sorted) InputBatch
        return [(rid, int(qsl[k]), int(qsl[k + 1]) - int(qsl[k])) for k, rid in enumerate(batch.req_ids)]
    batch = runner.input_batch  # V1 model runner: rows follow the persistent batch order
    counts = scheduler_output.num_scheduled_tokens
    spans, start = [], 0
    for rid in batch.req_ids[: batch.num_reqs]:
        n = int(counts.get(rid, 0)) if rid is not None else 0
        if n:
            spans.append((rid, start, n))
            start += n
    return spans


def computed_tokens(scheduler_output: Any) -> dict[str, int]:
    """Each scheduled request's ``num_computed_tokens``: where this step's rows start."""
    out = {req.req_id: int(req.num_computed_tokens) for req in getattr(scheduler_output, "scheduled_new_reqs", ()) or ()}
    cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
    if cached is not None and hasattr(cached, "req_ids"):
        out.update((rid, int(n)) for rid, n in zip(cached.req_ids, cached.num_computed_tokens))
    return out
