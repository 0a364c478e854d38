"""speculators' worker-side capture API on the shared mechanism of ``_vllm_compat_capture``.

Vendored by vllm-compat as ``speculators/_vllm_compat_generator_capture.py`` (the
``speculators.capture_hooks`` patch), beside ``speculators/_vllm_compat_capture.py``.  The
patched ``HiddenStatesWorkerExtension`` installs it in ``_setup_hidden_states_capture``,
clears it in ``_reset_capture`` and returns ``collect()`` from ``_get_captured_states``.
"""

from __future__ import annotations

from typing import Any, Callable

from speculators._vllm_compat_capture import Job, StepCapture

__all__ = ["HiddenStatesCapture"]


class HiddenStatesCapture(StepCapture):
    """speculators' generator: every request; ``collect()`` gives ``{request id: [states per
    layer id]}`` (``sink``'s result per request; by default the host tensors themselves)."""

    def __init__(self, worker: Any, layer_ids: list[int], sink: Callable[[Job], Any] | None = None) -> None:
        from vllm.distributed import get_tp_group

        self.enabled = get_tp_group().rank_in_group == 0
        self.order: dict[str, None] = {}  # claimed request ids, in scheduling order
        self.results: dict[str, Any] = {}
        self.failed: dict[str, str] = {}
        self._sink = sink
        if self.enabled:
            super().__init__(worker, layer_ids)
        else:  # the other TP ranks hold the same residual stream: capture nothing there
            self.worker, self.layer_ids, self.threads, self.handles = worker, list(layer_ids), [], []
            self._originals = {}

    @classmethod
    def install(cls, worker: Any, layer_ids: list[int], sink: Callable[[Job], Any] | None = None) -> "HiddenStatesCapture":
        """Install on ``worker`` (replacing an earlier installation) and return it."""
        previous = getattr(worker, "_vllm_compat_capture", None)
        if previous is not None and hasattr(previous, "close"):
            previous.close()
        capture = cls(worker, layer_ids, sink)
        worker._vllm_compat_capture = capture
        return capture

    def set_sink(self, sink: Callable[[Job], Any] | None) -> None:
        """Where finished requests' states go from now on (set before the first step)."""
        self._sink = sink

    def claim(self, request: Any) -> Job | None:
        ids = getattr(request, "prompt_token_ids", None)
        if ids is None or request.req_id in self.order:  # no prompt ids, or seen (a preempted one)
            return None
        self.order[request.req_id] = None
        return Job(request.req_id, list(ids))

    def sink(self, job: Job) -> Any:
        # the host buffers are reused once this returns: the default keeps copies
        return self._sink(job) if self._sink is not None else [h.clone() for h in job.host]

    def done(self, job: Job, result: Any, problem: str | None) -> None:
        with self.lock:
            if problem is None:
                self.results[job.key] = result
            else:
                self.failed[job.key] = problem

    def close(self) -> None:
        if self.enabled:
            super().close()
        getattr(self._sink, "cleanup", lambda: None)()

    def reset(self) -> None:
        if self.enabled:
            self.drain()
        self.order, self.results, self.failed = {}, {}, {}
        getattr(self._sink, "cleanup", lambda: None)()
        if getattr(self.worker, "_current_request_metadata", None) is not None:
            self.worker._current_request_metadata = None  # speculators 0.4.0's per-step counts: not needed

    def collect(self) -> dict[str, Any] | None:
        """``{request id: result}`` in scheduling order, then reset; None if nothing was
        captured.  Raises if a request's states are incomplete or misattributed."""
        if not self.enabled:
            return None
        self.drain()
        out = {k: self.results[k] for k in self.order if k in self.results}
        failed = dict(self.failed)
        self.order, self.results, self.failed = {}, {}, {}
        if failed:
            detail = "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:5])
            raise RuntimeError(f"hidden states of {len(failed)} requests are unusable: {detail}")
        return out or None
