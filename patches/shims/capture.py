"""Hidden-state capture inside a vLLM worker, per request, at prefill speed.

Vendored by vllm-compat into the patched ``speculators`` package as
``speculators/_vllm_compat_capture.py`` (patched code imports it from there and never imports
``vllm_compat``); ``eagle3_runner``'s fast path imports it from ``patches.shims.capture``.
Its parts that change for other reasons live beside it: ``runner_layout`` (which rows of a step
are whose, per vLLM model runner) and ``host_memory`` (pinned buffers, file writes).
One mechanism for both: speculators' generator hands the finished requests to the driver
(``speculators.states_in_shared_memory``), the fast path writes them to files.

What is captured (a deliberate correction of upstream, see the ``capture_hooks`` patch):
layer id ``i < N`` (``N = num_hidden_layers``) is the residual stream ENTERING decoder layer
``i`` (``hidden_states + residual``; for layer 0 just ``hidden_states``), id ``N`` the last
layer's output before the final norm: what vLLM's EAGLE-3 serving path feeds the draft
(``aux_hidden_state_layers`` in ``vllm/model_executor/models/llama.py``).

How:

* forward pre-hooks on the decoder layers (a forward hook on the last layer for id ``N``), so
  vLLM's own forward runs unchanged on every architecture and release; pre-hooks on the
  embedding and the first layer record the step's token ids and positions, which prove the
  attribution per token (captured ids == prompt, positions == 0..T-1);
* hooks record only inside the runner's ``execute_model`` (never in profiling or warm-up);
* each step's rows are split per request with the runner's own layout of that step (Model
  Runner V2: the step's ``InputBatch``; V1 runner: ``input_batch.req_ids`` order with the
  scheduled token counts) and placed at the request's ``num_computed_tokens`` offset, so
  chunked prefill and reordering land in the right rows; decode rows are dropped;
* per step, on a side CUDA stream, one ``non_blocking`` copy per (request, layer) into that
  request's pinned host buffer; the compute stream never waits for them;
* a finished request goes to ``sink`` in a pool of threads, which first wait for its copies.

With tensor parallelism only TP rank 0 captures (the residual stream is replicated).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

# Vendored, the siblings sit beside this module under their vendored names; in patches/shims/
# (where eagle3_runner's fast path imports it) under their own.
if __package__ == "speculators":
    from speculators._vllm_compat_host_memory import PinnedPool
    from speculators._vllm_compat_runner_layout import base_model, computed_tokens, step_layout
else:
    from patches.shims.host_memory import PinnedPool
    from patches.shims.runner_layout import base_model, computed_tokens, step_layout

__all__ = ["Job", "StepCapture"]

logger = logging.getLogger(__name__)


def _stream(hidden_states: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    # A new tensor either way: layers update their inputs in place (fused add + norm).
    return hidden_states.clone() if residual is None else hidden_states + residual


@dataclass(eq=False)
class Job:
    """One request's capture: host buffers ``[T, H]`` per layer id, filled step by step."""

    key: Any  # the consumer's name for it (a request id, a sample index)
    prompt: list[int]  # token ids: the captured ids must equal them
    payload: Any = None  # the consumer's own data
    host: list[torch.Tensor] = field(default_factory=list)
    ids: Any = None  # captured token ids [T] (-1: not seen)
    pos: Any = None  # captured positions [T]
    ok: Any = None  # per-row "all finite" flags [T]
    checks: set[str] = field(default_factory=set)  # what problem() verifies (set by the capture)
    covered: int = 0  # rows written so far (highest end)
    events: list[Any] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt)

    @property
    def nbytes(self) -> int:
        return sum(h.numel() * h.element_size() for h in self.host)


class StepCapture:
    """Capture of ``layer_ids`` in one worker; subclasses say which requests to capture
    (:meth:`claim`) and what happens to a finished one (:meth:`sink`, :meth:`done`, called in
    the pool's threads)."""

    check_finite = False  # also flag rows with NaN/inf (computed on the device)

    def __init__(self, worker: Any, layer_ids: list[int], threads: int = 8, max_pending_bytes: int = 8 << 30,
                 pool_bytes: int = 2 << 30) -> None:
        runner = worker.model_runner
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        base = base_model(model)
        layers = base.layers
        n = len(layers)
        self.worker, self.runner, self.num_layers = worker, runner, n
        self.layer_ids = [int(i) for i in layer_ids]
        for lid in self.layer_ids:
            if not 0 <= lid <= n:
                raise ValueError(f"Layer index {lid} out of bounds [0, {n}]")
        self.device = next(base.parameters()).device
        self.cuda = self.device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.pool = PinnedPool(min(pool_bytes, max_pending_bytes)) if self.cuda and pool_bytes > 0 else None
        self.max_pending_bytes = int(max_pending_bytes)
        self.active: dict[str, Job] = {}  # vLLM request id -> its job, while being filled
        self.recording = False
        self.step: dict[int, torch.Tensor] = {}
        self.step_ids = self.step_pos = self.last_batch = None
        self._sigs: dict[int, inspect.Signature] = {}
        self.lock = threading.Condition()
        self.pending_bytes = self.outstanding = 0
        self.stats = dict.fromkeys(("steps", "tokens", "t_dispatch_s", "t_backpressure_s", "t_wait_copy_s",
                                    "t_sink_s"), 0)
        self.first_step = self.last_done = None
        self.handles = []
        for lid in sorted(set(self.layer_ids)):
            layer = layers[min(lid, n - 1)]
            if type(layer).__name__ == "PPMissingLayer":
                continue
            if lid < n:
                self.handles.append(layer.register_forward_pre_hook(partial(self._pre_hook, lid), with_kwargs=True))
            else:
                self.handles.append(layer.register_forward_hook(partial(self._post_hook, lid), with_kwargs=True))
        if getattr(base, "embed_tokens", None) is not None:
            self.handles.append(base.embed_tokens.register_forward_pre_hook(self._ids_hook, with_kwargs=True))
        self.handles.append(layers[0].register_forward_pre_hook(self._positions_hook, with_kwargs=True))
        self._originals: dict[str, tuple[Any, bool]] = {}
        self._wrap("execute_model", self._execute_model)
        if hasattr(runner, "prepare_inputs") and hasattr(runner, "req_states"):
            self._wrap("prepare_inputs", self._prepare_inputs)  # Model Runner V2: keep the step's InputBatch
        self.queue: queue.Queue = queue.Queue()
        self.threads = [threading.Thread(target=self._run, name=f"capture-{k}", daemon=True)
                        for k in range(max(1, int(threads)))]
        for t in self.threads:
            t.start()

    # -- what subclasses decide ---------------------------------------------------------------
    def claim(self, request: Any) -> Job | None:
        """The job for a newly scheduled request (``NewRequestData``), or None to ignore it."""
        raise NotImplementedError

    def sink(self, job: Job) -> Any:
        """Consume a finished, checked job (its host buffers are filled); returns a result."""
        return list(job.host)

    def done(self, job: Job, result: Any, problem: str | None) -> None:
        """Called once per claimed job that finished or failed (any thread)."""

    def _wrap(self, name: str, wrapper: Any) -> None:
        self._originals[name] = (getattr(self.runner, name), name in self.runner.__dict__)
        setattr(self.runner, name, wrapper)

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        for name, (original, own) in self._originals.items():
            if self.runner.__dict__.get(name) == getattr(self, f"_{name}"):
                if own:
                    setattr(self.runner, name, original)
                else:
                    delattr(self.runner, name)
        self._originals = {}
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join()

    # -- hooks --------------------------------------------------------------------------------
    def _bind(self, module: Any, args: tuple, kwargs: dict) -> dict:
        sig = self._sigs.get(id(module))
        if sig is None:
            sig = self._sigs[id(module)] = inspect.signature(module.forward)
        return sig.bind_partial(*args, **kwargs).arguments

    def _ids_hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        # vLLM's compile decorator can bypass the base model's hooks: take the embedding's input.
        if self.recording:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.step_ids = ids.clone() if ids is not None else None  # the buffer is reused

    def _positions_hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        if self.recording:
            pos = self._bind(module, args, kwargs).get("positions")
            self.step_pos = pos.clone() if pos is not None and pos.dim() == 1 else None  # not M-RoPE

    def _pre_hook(self, lid: int, module: Any, args: tuple, kwargs: dict) -> None:
        if self.recording:
            a = self._bind(module, args, kwargs)
            if "hidden_states" in a:
                self.step[lid] = _stream(a["hidden_states"], a.get("residual"))
            else:  # positional (positions, hidden_states, residual)
                self.step[lid] = _stream(args[1], args[2] if len(args) > 2 else None)

    def _post_hook(self, lid: int, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if self.recording:
            hs, res = (output[0], output[1] if len(output) > 1 else None) if isinstance(output, tuple) else (output, None)
            self.step[lid] = _stream(hs, res)

    def _prepare_inputs(self, *args: Any, **kwargs: Any) -> Any:
        self.last_batch = self._originals["prepare_inputs"][0](*args, **kwargs)
        return self.last_batch

    # -- steps --------------------------------------------------------------------------------
    def _execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self._admit(scheduler_output)
        execute = self._originals["execute_model"][0]
        if not self.active:
            return execute(scheduler_output, *args, **kwargs)
        self.step, self.step_ids, self.step_pos, self.last_batch = {}, None, None, None
        self.recording = True
        try:
            out = execute(scheduler_output, *args, **kwargs)
        finally:
            self.recording = False
        if self.step:
            t0 = time.perf_counter()
            self._dispatch(scheduler_output)
            self.stats["t_dispatch_s"] += time.perf_counter() - t0
        self.step, self.step_ids, self.step_pos = {}, None, None
        return out

    def _admit(self, so: Any) -> None:
        for req in getattr(so, "scheduled_new_reqs", None) or ():
            if req.req_id not in self.active:
                job = self.claim(req)
                if job is not None:
                    self.active[req.req_id] = job
                    with self.lock:
                        self.outstanding += 1
        for rid in getattr(so, "finished_req_ids", None) or ():
            job = self.active.pop(rid, None)
            if job is not None:  # finished (aborted) before its prompt was complete
                self._finish(job, f"request finished after {job.covered} of {job.num_tokens} prompt rows")

    def _host(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return self.pool.take(shape, dtype) if self.pool is not None else torch.empty(shape, dtype=dtype)

    def _alloc(self, job: Job, like: torch.Tensor) -> None:
        T = job.num_tokens
        job.host = [self._host((T, like.shape[-1]), like.dtype) for _ in self.layer_ids]
        job.ids = self._host((T,), torch.long).fill_(-1)
        job.pos = self._host((T,), torch.long).fill_(-1)
        job.ok = self._host((T,), torch.bool).fill_(False) if self.check_finite else None
        job.checks = {"ids", "pos", "ok"} if self.check_finite else {"ids", "pos"}

    def _dispatch(self, so: Any) -> None:
        if self.first_step is None:
            self.first_step = time.perf_counter()
        states = [self.step.get(lid) for lid in self.layer_ids]
        if any(s is None for s in states):
            raise RuntimeError("hidden-states capture: a layer hook did not fire in this step")
        rows = states[0].shape[0]
        computed = computed_tokens(so)
        todo = []
        for rid, start, n in step_layout(self.runner, so, self.last_batch):
            job = self.active.get(rid)
            if job is not None:
                off = computed.get(rid, job.covered)
                m = min(n, job.num_tokens - off)
                if m > 0 and start + m <= rows:  # else decode rows, or nothing left of the prompt
                    todo.append((rid, job, start, off, m))
        if not todo:
            return
        ids, pos = self.step_ids, self.step_pos
        okrow = torch.stack([torch.isfinite(s).all(dim=-1) for s in states]).all(dim=0) if self.check_finite else None
        if self.cuda:
            self.copy_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.copy_stream) if self.cuda else contextlib.nullcontext():
            for _, job, start, off, m in todo:
                if not job.host:
                    self._alloc(job, states[0])
                for k, s in enumerate(states):
                    job.host[k][off:off + m].copy_(s[start:start + m], non_blocking=self.cuda)
                for name, src, dst in (("ids", ids, job.ids), ("pos", pos, job.pos), ("ok", okrow, job.ok)):
                    if src is not None:
                        dst[off:off + m].copy_(src[start:start + m], non_blocking=self.cuda)
                    else:
                        job.checks.discard(name)  # not recorded for this model (M-RoPE, embeddings)
                job.covered = max(job.covered, off + m)
        ev = None
        if self.cuda:
            ev = torch.cuda.Event()
            ev.record(self.copy_stream)
            for t in (*states, okrow, ids, pos):
                if t is not None:
                    t.record_stream(self.copy_stream)
        self.stats["steps"] += 1
        for rid, job, _, _, m in todo:
            self.stats["tokens"] += m
            if ev is not None:
                job.events.append(ev)
            if job.covered >= job.num_tokens:
                del self.active[rid]
                with self.lock:
                    self.pending_bytes += job.nbytes
                self.queue.put(job)
        if self.pending_bytes > self.max_pending_bytes:  # bound the host memory waiting for the sink
            t0 = time.perf_counter()
            with self.lock:
                while self.pending_bytes > self.max_pending_bytes:
                    self.lock.wait(0.05)
            self.stats["t_backpressure_s"] += time.perf_counter() - t0

    # -- the pool -----------------------------------------------------------------------------
    def problem(self, job: Job) -> str | None:
        """Why a finished job must not be used (its copies are complete), or None."""
        T = job.num_tokens
        if job.covered < T:
            return f"{job.covered} of {T} prompt rows captured"
        if "ok" in job.checks and not bool(job.ok.all()):
            return f"{int((~job.ok).sum())} of {T} rows not finite"
        if "pos" in job.checks and not torch.equal(job.pos, torch.arange(T, dtype=torch.long)):
            return f"captured positions are not 0..T-1 (attribution error): {job.pos[:8].tolist()}"
        if "ids" in job.checks and job.ids.tolist() != job.prompt:
            return "captured token ids differ from the prompt (attribution error)"
        return None

    def _finish(self, job: Job, problem: str | None, result: Any = None) -> None:
        try:
            self.done(job, result, problem)
        finally:
            if self.pool is not None:
                self.pool.give([t for t in (*job.host, job.ids, job.pos, job.ok) if t is not None])
            job.host, job.events, job.ids, job.pos, job.ok = [], [], None, None, None
            with self.lock:
                self.outstanding -= 1
                self.last_done = time.perf_counter()
                self.lock.notify_all()

    def _run(self) -> None:
        while (job := self.queue.get()) is not None:
            nbytes, result = job.nbytes, None
            try:
                t0 = time.perf_counter()
                for ev in job.events:
                    ev.synchronize()
                t1 = time.perf_counter()
                why = self.problem(job)
                if why is None:
                    result = self.sink(job)
                with self.lock:
                    self.stats["t_wait_copy_s"] += t1 - t0
                    self.stats["t_sink_s"] += time.perf_counter() - t1
            except Exception as exc:  # noqa: BLE001 - reported per job, the worker goes on
                logger.exception("hidden-states capture: request %s failed", job.key)
                why = f"{type(exc).__name__}: {exc}"
            with self.lock:
                self.pending_bytes -= nbytes
            self._finish(job, why, result)

    def drain(self, timeout: float | None = None) -> list[Job]:
        """Wait until every finished job went through the pool; fail and return the jobs still
        incomplete."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        with self.lock:
            while self.outstanding > len(self.active):
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    break
                self.lock.wait(0.05 if left is None else min(0.05, left))
        incomplete = list(self.active.values())
        self.active.clear()
        for job in incomplete:
            self._finish(job, f"{job.covered} of {job.num_tokens} prompt rows captured")
        return incomplete
