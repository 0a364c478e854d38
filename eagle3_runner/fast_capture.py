"""Hidden-state extraction at prefill speed: capture, copy and write inside the vLLM worker.

The slow way (speculators' generator) returns every captured tensor from the worker to the
driver through ``collective_rpc``; that costs ~95% of the prefill throughput. Here the worker
does everything and the driver only sees small summaries:

* ``LLM(..., worker_extension_cls="eagle3_runner.fast_capture.CaptureWorkerExtension",
  enable_prefix_caching=False, enforce_eager=True)``. Prefix caching must be off: a cached
  prefix skips the forward pass, and its states would never be seen.
* The extension (``fc_setup``) registers forward pre-hooks on the decoder layers: for layer id
  ``i < N`` the residual stream ENTERING layer ``i`` (``hidden_states + residual``; for layer 0
  just ``hidden_states``), for id ``N`` the last layer's output before the final norm (a forward
  hook on the last layer summing its two outputs). Same convention as the patched speculators
  generator (``patches/shims/capture.py``) and vLLM's own EAGLE-3 ``aux_hidden_state_layers``.
  Pre-hooks on the embedding and the first layer record the step's ``input_ids`` and
  ``positions`` (for validation of the attribution).
* Attribution: the runner's ``execute_model`` is wrapped. Each request carries its sample index
  in ``SamplingParams.extra_args`` (so the driver need not guess vLLM's internal request ids).
  The rows of a step are split per request from the runner's own layout of that step (Model
  Runner V2: the step's ``InputBatch``; V1 runner: ``input_batch.req_ids`` order with
  ``scheduler_output.num_scheduled_tokens`` rows each) and placed at the request's
  ``num_computed_tokens`` offset, so chunked prefill (a prompt over several steps) and
  recomputation after preemption land in the right rows. Decode rows are ignored.
* Per step, on a side CUDA stream: one ``non_blocking`` copy per (request, layer) from the GPU
  into that request's pinned host buffer, plus the step's token ids, positions and a per-row
  "all finite" flag computed on the GPU; a CUDA event marks completion. The compute stream
  never waits for these copies.
* When a request's prompt is complete, a writer thread waits for its event, validates the
  sample (lengths, finite rows, captured token ids == prompt, positions == 0..T-1, i.e. the
  attribution is proven per token) and writes ``OUT/data_{index}.pt`` atomically (temp file in
  the same folder, fsync, ``os.replace``) in speculators' format ``{"input_ids": LongTensor[T],
  "hidden_states": [Tensor[T, H] per layer id], "loss_mask": LongTensor[T]}``. The default
  ``raw`` writer lays the file out with ``torch.save`` under ``torch.serialization.skip_data``
  (header and pickle only) and then ``os.pwrite``s the tensor bytes straight from the pinned
  buffers (no GIL held, no extra copy); the file is an ordinary ``torch.load``-able dict.
* With tensor parallelism only TP rank 0 captures and writes (the residual stream is
  replicated across TP ranks).

``extract_fast(...)`` is the driver entry point (resume: samples whose file exists and is valid
are skipped).
"""

from __future__ import annotations

import inspect
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from patches.shims.capture import step_layout

from .atomic import TMP_MARK, clean_temporaries, fsync_dir
from .formats import existing_sample_ok, sample_path, sample_problems

logger = logging.getLogger(__name__)

EXTENSION = "eagle3_runner.fast_capture.CaptureWorkerExtension"
EXTRA_KEY = "eagle3_fast_capture"

__all__ = [
    "EXTENSION",
    "CaptureWorkerExtension",
    "extract_fast",
    "sample_path",
    "valid_sample_file",
    "run_fast",
    "make_llm",
    "write_sample_atomic",
]


# ----------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------
def _pwrite_all(fd: int, mv: memoryview, offset: int) -> None:
    done = 0
    total = len(mv)
    while done < total:
        n = os.pwrite(fd, mv[done:], offset + done)
        if n <= 0:
            raise OSError(f"pwrite wrote {n} bytes")
        done += n


def _bytes_view(t: Any) -> memoryview:
    import torch

    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")


def _has_skip_data() -> bool:
    import torch

    return hasattr(torch.serialization, "skip_data") and hasattr(torch._C, "PyTorchFileReader")


def write_sample_atomic(path: str | os.PathLike, sample: dict, mode: str = "raw", fsync: bool = True) -> int:
    """Write ``sample`` to ``path`` atomically (temp + fsync + os.replace); return bytes written.

    ``mode="raw"``: layout by ``torch.save`` under ``skip_data``, tensor bytes by ``os.pwrite``
    (every tensor must own its whole storage: no views into larger buffers).
    ``mode="torch"``: plain ``torch.save``. Both give the same ``torch.load``-able dict.
    """
    import torch

    path = Path(path)
    # Same temporary naming as eagle3_runner.atomic, so clean_temporaries() removes leftovers.
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}")
    tensors = [sample["input_ids"], *sample["hidden_states"], sample["loss_mask"]]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    try:
        if mode == "raw" and _has_skip_data():
            for t in tensors:
                if t.untyped_storage().nbytes() != t.numel() * t.element_size() or not t.is_contiguous():
                    raise ValueError("raw writer needs tensors that own their whole storage")
            with torch.serialization.skip_data():
                torch.save(sample, str(tmp))
            reader = torch._C.PyTorchFileReader(str(tmp))
            # Storage keys follow pickling order: input_ids, hidden_states..., loss_mask.
            offsets = [reader.get_record_offset(f"data/{k}") for k in range(len(tensors))]
            del reader
            fd = os.open(tmp, os.O_WRONLY)
            try:
                for t, off in zip(tensors, offsets):
                    _pwrite_all(fd, _bytes_view(t), off)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with open(tmp, "wb") as f:
                torch.save(sample, f)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return nbytes


def valid_sample_file(path: str | os.PathLike, input_ids: Sequence[int], num_layers: int, hidden_size: int) -> bool:
    """True if ``path`` holds a loadable sample of this shape for ``input_ids`` (resume check)."""
    return existing_sample_ok(Path(path), num_layers=num_layers, hidden_size=hidden_size, input_ids=list(input_ids))


# ----------------------------------------------------------------------------------------------
# worker side
# ----------------------------------------------------------------------------------------------
def _base_model(model: Any) -> Any:
    if hasattr(model, "get_language_model"):
        lm = model.get_language_model()
        if hasattr(lm, "model") and hasattr(lm.model, "layers"):
            return lm.model
    if hasattr(model, "model") and hasattr(model.model, "layers"):
        return model.model
    raise AttributeError(f"no base model with decoder 'layers' in {type(model).__name__}")


@dataclass
class _Job:
    index: int
    input_ids: list[int]
    loss_mask: list[int]
    path: str
    num_tokens: int = 0
    host: list[Any] = field(default_factory=list)  # [T, H] per layer id
    ids: Any = None  # captured token ids [T]
    pos: Any = None  # captured positions [T]
    ok: Any = None  # per-row all-finite flag [T]
    covered: int = 0  # highest row end written so far
    events: list[Any] = field(default_factory=list)
    t_first: float = 0.0


class _Capture:
    """State of the capture inside one worker (TP rank 0 only)."""

    def __init__(self, worker: Any, layer_ids: list[int], writer_threads: int, write_mode: str,
                 fsync: bool, max_pending_bytes: int) -> None:
        import torch

        self.worker = worker
        runner = worker.model_runner
        self.runner = runner
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        base = _base_model(model)
        layers = base.layers
        n = len(layers)
        self.num_hidden_layers = n
        self.layer_ids = [int(i) for i in layer_ids]
        for lid in self.layer_ids:
            if not 0 <= lid <= n:
                raise ValueError(f"layer id {lid} out of range [0, {n}]")
        self.device = next(model.parameters()).device
        self.cuda = self.device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.write_mode = write_mode
        self.fsync = fsync
        self.max_pending_bytes = int(max_pending_bytes)
        self.jobs: dict[int, _Job] = {}  # sample index -> job (registered, not yet seen)
        self.active: dict[str, _Job] = {}  # vLLM request id -> job
        self.recording = False
        self.step: dict[int, Any] = {}
        self.step_ids = None
        self.step_pos = None
        self.handles: list[Any] = []
        self._sigs: dict[int, inspect.Signature] = {}
        self.dtype = None
        self.hidden_size = int(worker.vllm_config.model_config.get_hidden_size())
        # stats
        self.lock = threading.Condition()
        self.pending_bytes = 0
        self.pending_jobs = 0
        self.written = 0
        self.bytes_written = 0
        self.bad: list[tuple[int, str]] = []
        self.t_write = 0.0  # summed over writer threads
        self.t_wait_copy = 0.0
        self.t_hooks = 0.0
        self.t_stall = 0.0
        self.steps = 0
        self.tokens = 0
        self.first_step = None
        self.last_write = None

        for lid in sorted(set(self.layer_ids)):
            if lid < n:
                self.handles.append(layers[lid].register_forward_pre_hook(
                    partial(self._pre_hook, lid), with_kwargs=True))
            else:
                self.handles.append(layers[n - 1].register_forward_hook(
                    partial(self._post_hook, lid), with_kwargs=True))
        embed = getattr(base, "embed_tokens", None)
        if embed is not None:
            self.handles.append(embed.register_forward_pre_hook(self._embed_pre_hook, with_kwargs=True))
        self.handles.append(layers[0].register_forward_pre_hook(self._positions_pre_hook, with_kwargs=True))
        self._orig_execute = runner.execute_model
        runner.execute_model = self._execute_model
        self._orig_prepare = None
        if hasattr(runner, "prepare_inputs") and hasattr(runner, "req_states"):
            # Model Runner V2: keep the step's InputBatch (req_ids, query_start_loc_np).
            self._orig_prepare = runner.prepare_inputs
            runner.prepare_inputs = self._prepare_inputs
        self.last_batch = None

        self.queue: queue.Queue = queue.Queue()
        self.threads = [threading.Thread(target=self._writer, name=f"fc-writer-{k}", daemon=True)
                        for k in range(max(1, int(writer_threads)))]
        for t in self.threads:
            t.start()

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.runner.__dict__.get("execute_model") == self._execute_model:
            del self.runner.execute_model
        if self._orig_prepare is not None and self.runner.__dict__.get("prepare_inputs") == self._prepare_inputs:
            del self.runner.prepare_inputs
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

    def _embed_pre_hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        # The base model's own forward can bypass module hooks (vLLM's compile decorator
        # overrides __call__), so the step's token ids come from the embedding's input.
        if not self.recording:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        # Clone: the runner's persistent buffer is rewritten by the next step.
        self.step_ids = ids.clone() if ids is not None else None

    def _positions_pre_hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        if not self.recording:
            return
        pos = self._bind(module, args, kwargs).get("positions")
        self.step_pos = pos.clone() if pos is not None and pos.dim() == 1 else None

    def _pre_hook(self, lid: int, module: Any, args: tuple, kwargs: dict) -> None:
        if not self.recording:
            return
        a = self._bind(module, args, kwargs)
        if "hidden_states" in a:
            hs, res = a["hidden_states"], a.get("residual")
        else:  # positional (positions, hidden_states, residual)
            hs, res = args[1], args[2] if len(args) > 2 else None
        # A new tensor either way: layers update their inputs in place (fused add + norm).
        self.step[lid] = hs.clone() if res is None else hs + res

    def _post_hook(self, lid: int, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if not self.recording:
            return
        if isinstance(output, tuple):
            hs, res = output[0], output[1] if len(output) > 1 else None
        else:
            hs, res = output, None
        self.step[lid] = hs.clone() if res is None else hs + res

    def _prepare_inputs(self, *args: Any, **kwargs: Any) -> Any:
        batch = self._orig_prepare(*args, **kwargs)
        self.last_batch = batch
        return batch

    # -- steps --------------------------------------------------------------------------------
    def _execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self._admit(scheduler_output)
        if not self.active:
            return self._orig_execute(scheduler_output, *args, **kwargs)
        self.step = {}
        self.step_ids = self.step_pos = None
        self.last_batch = None
        self.recording = True
        try:
            out = self._orig_execute(scheduler_output, *args, **kwargs)
        finally:
            self.recording = False
        if self.step:
            t0 = time.perf_counter()
            self._dispatch(scheduler_output)
            self.t_hooks += time.perf_counter() - t0
        self.step = {}
        self.step_ids = self.step_pos = None
        return out

    def _admit(self, so: Any) -> None:
        for req in getattr(so, "scheduled_new_reqs", None) or ():
            sp = getattr(req, "sampling_params", None)
            extra = getattr(sp, "extra_args", None) or {}
            if EXTRA_KEY not in extra:
                continue
            index = int(extra[EXTRA_KEY])
            job = self.jobs.pop(index, None)
            if job is None:
                job = self.active.get(req.req_id)
                if job is None:
                    logger.warning("fast capture: request for unregistered sample %d", index)
                    continue
            self.active[req.req_id] = job
        for rid in getattr(so, "finished_req_ids", None) or ():
            job = self.active.get(rid)
            if job is not None and job.covered < job.num_tokens:
                # Finished (aborted) before its prompt was complete.
                del self.active[rid]
                self._fail(job, "request finished before its prompt was captured")

    def _layout(self, so: Any) -> list[tuple[str, int, int]]:
        """``(request id, first row, rows)`` of each request in this step's batch."""
        return step_layout(self.runner, so, self.last_batch)

    @staticmethod
    def _computed(so: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for req in getattr(so, "scheduled_new_reqs", None) or ():
            out[req.req_id] = int(req.num_computed_tokens)
        cached = getattr(so, "scheduled_cached_reqs", None)
        if cached is not None and hasattr(cached, "req_ids"):
            for rid, nc in zip(cached.req_ids, cached.num_computed_tokens):
                out[rid] = int(nc)
        return out

    def _alloc(self, job: _Job, like: Any) -> None:
        import torch

        T, H = job.num_tokens, like.shape[-1]
        pin = self.cuda
        job.host = [torch.empty((T, H), dtype=like.dtype, pin_memory=pin) for _ in self.layer_ids]
        job.ids = torch.full((T,), -1, dtype=torch.long, pin_memory=pin)
        job.pos = torch.full((T,), -1, dtype=torch.long, pin_memory=pin)
        job.ok = torch.zeros((T,), dtype=torch.bool, pin_memory=pin)
        self.dtype = like.dtype

    def _dispatch(self, so: Any) -> None:
        import torch

        if self.first_step is None:
            self.first_step = time.perf_counter()
        states = [self.step.get(lid) for lid in self.layer_ids]
        if any(s is None for s in states):
            raise RuntimeError("fast capture: a hook did not fire in this step")
        rows = states[0].shape[0]
        spans = self._layout(so)
        computed = self._computed(so)
        todo = []
        for rid, start, n in spans:
            job = self.active.get(rid)
            if job is None:
                continue
            off = computed.get(rid, job.covered)
            m = min(n, job.num_tokens - off)
            if m <= 0 or start + m > rows:
                continue  # decode rows (or nothing left of the prompt)
            todo.append((job, start, off, m))
        if not todo:
            return
        ids, pos = self.step_ids, self.step_pos
        # Per-row finite flags on the device (one pass over the captured rows, no host work).
        okrow = torch.stack([torch.isfinite(s).all(dim=-1) for s in states]).all(dim=0)
        for job, _, _, _ in todo:
            if not job.host:
                self._alloc(job, states[0])
                job.t_first = time.perf_counter()
        finished = []
        if self.cuda:
            cur = torch.cuda.current_stream(self.device)
            self.copy_stream.wait_stream(cur)
            ctx = torch.cuda.stream(self.copy_stream)
        else:
            ctx = _nullcontext()
        with ctx:
            for job, start, off, m in todo:
                for k, s in enumerate(states):
                    job.host[k][off:off + m].copy_(s[start:start + m], non_blocking=self.cuda)
                if ids is not None:
                    job.ids[off:off + m].copy_(ids[start:start + m], non_blocking=self.cuda)
                if pos is not None:
                    job.pos[off:off + m].copy_(pos[start:start + m], non_blocking=self.cuda)
                job.ok[off:off + m].copy_(okrow[start:start + m], non_blocking=self.cuda)
                job.covered = max(job.covered, off + m)
        ev = None
        if self.cuda:
            ev = torch.cuda.Event()
            ev.record(self.copy_stream)
            for t in (*states, okrow, ids, pos):
                if t is not None:
                    t.record_stream(self.copy_stream)
        self.steps += 1
        for job, start, off, m in todo:
            self.tokens += m
            if ev is not None:
                job.events.append(ev)
            if job.covered >= job.num_tokens and off + m >= job.num_tokens:
                finished.append(job)
        for job in finished:
            for rid in [r for r, j in self.active.items() if j is job]:
                del self.active[rid]
            nbytes = sum(h.numel() * h.element_size() for h in job.host)
            with self.lock:
                self.pending_bytes += nbytes
            self.queue.put(job)
        # Back-pressure: bound the host memory held by samples waiting for the writers.
        if self.pending_bytes > self.max_pending_bytes:
            t0 = time.perf_counter()
            with self.lock:
                while self.pending_bytes > self.max_pending_bytes:
                    self.lock.wait(0.05)
            self.t_stall += time.perf_counter() - t0

    # -- writers ------------------------------------------------------------------------------
    def _fail(self, job: _Job, why: str) -> None:
        with self.lock:
            self.bad.append((job.index, why))
            self.pending_jobs -= 1
            self.lock.notify_all()

    def _writer(self) -> None:
        import torch

        while True:
            job = self.queue.get()
            if job is None:
                return
            nbytes = sum(h.numel() * h.element_size() for h in job.host)
            try:
                t0 = time.perf_counter()
                for ev in job.events:
                    ev.synchronize()
                t1 = time.perf_counter()
                why = self._check(job)
                if why is None:
                    sample = {
                        "input_ids": torch.tensor(job.input_ids, dtype=torch.long),
                        "hidden_states": job.host,
                        "loss_mask": torch.tensor(job.loss_mask, dtype=torch.long),
                    }
                    problems = sample_problems(sample, num_layers=len(self.layer_ids), hidden_size=self.hidden_size,
                                               input_ids=job.input_ids, check_finite=False)
                    why = "; ".join(problems) if problems else None  # finite: checked per row on the GPU
                if why is None:
                    if self.write_mode == "none":  # benchmarking only: capture, copy, validate
                        written = sum(t.numel() * t.element_size() for t in
                                      (sample["input_ids"], *sample["hidden_states"], sample["loss_mask"]))
                    else:
                        written = write_sample_atomic(job.path, sample, self.write_mode, self.fsync)
                t2 = time.perf_counter()
                with self.lock:
                    self.t_wait_copy += t1 - t0
                    self.t_write += t2 - t1
                    self.pending_bytes -= nbytes
                    if why is None:
                        self.written += 1
                        self.bytes_written += written
                        self.last_write = time.perf_counter()
                    else:
                        self.bad.append((job.index, why))
                    self.pending_jobs -= 1
                    self.lock.notify_all()
            except Exception as e:  # noqa: BLE001
                logger.exception("fast capture: writing sample %d failed", job.index)
                with self.lock:
                    self.pending_bytes -= nbytes
                    self.bad.append((job.index, f"{type(e).__name__}: {e}"))
                    self.pending_jobs -= 1
                    self.lock.notify_all()
            finally:
                job.host = []
                job.events = []

    def _check(self, job: _Job) -> str | None:
        import torch

        T = job.num_tokens
        if not bool(job.ok.all()):
            bad_rows = int((~job.ok).sum())
            return f"{bad_rows} of {T} rows not captured or not finite"
        if not torch.equal(job.pos, torch.arange(T, dtype=torch.long)):
            return f"captured positions are not 0..T-1 (attribution error): {job.pos[:8].tolist()}"
        if not torch.equal(job.ids, torch.tensor(job.input_ids, dtype=torch.long)):
            return "captured token ids differ from the prompt (attribution error)"
        return None

    # -- API ----------------------------------------------------------------------------------
    def register(self, jobs: list) -> int:
        with self.lock:
            for index, input_ids, loss_mask, path in jobs:
                job = _Job(int(index), list(input_ids), list(loss_mask), str(path))
                job.num_tokens = len(job.input_ids)
                self.jobs[job.index] = job
                self.pending_jobs += 1
        return len(jobs)

    def drain(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.perf_counter() + timeout
        with self.lock:
            while self.pending_jobs > len(self.jobs) + self._active_count():
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    break
                self.lock.wait(0.05 if left is None else min(0.05, left))
        # Registered samples never scheduled, or scheduled but never finished: report them.
        for job in list(self.jobs.values()) + list({id(j): j for j in self.active.values()}.values()):
            self._fail(job, "no states captured (request never ran to the end of its prompt)")
        self.jobs.clear()
        self.active.clear()
        return self.summary()

    def _active_count(self) -> int:
        return len({id(j) for j in self.active.values()})

    def summary(self, reset: bool = True) -> dict:
        with self.lock:
            out = {
                "written": self.written,
                "bytes_written": self.bytes_written,
                "bad": [list(b) for b in self.bad],
                "steps": self.steps,
                "tokens_captured": self.tokens,
                "t_write_s": self.t_write,
                "t_wait_copy_s": self.t_wait_copy,
                "t_dispatch_s": self.t_hooks,
                "t_backpressure_s": self.t_stall,
                "t_first_step_to_last_write_s": (self.last_write - self.first_step)
                if self.first_step and self.last_write else None,
                "writer_threads": len(self.threads),
                "write_mode": self.write_mode,
                "fsync": self.fsync,
            }
            if reset:
                self.written = self.bytes_written = self.steps = self.tokens = 0
                self.bad = []
                self.t_write = self.t_wait_copy = self.t_hooks = self.t_stall = 0.0
                self.first_step = self.last_write = None
        return out


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class CaptureWorkerExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``); methods run via collective_rpc."""

    def fc_setup(self, layer_ids: list[int], writer_threads: int = 8, write_mode: str = "raw",
                 fsync: bool = True, max_pending_bytes: int = 8 << 30) -> dict:
        from vllm.distributed import get_tp_group

        old = getattr(self, "_fc", None)
        if old is not None:
            old.close()
            self._fc = None
        rank = get_tp_group().rank_in_group
        info = {"tp_rank": rank, "runner": type(self.model_runner).__module__}
        if rank != 0:
            return info
        self._fc = _Capture(self, list(layer_ids), writer_threads, write_mode, fsync, max_pending_bytes)
        info["num_hidden_layers"] = self._fc.num_hidden_layers
        info["device"] = str(self._fc.device)
        info["hidden_size"] = int(self.vllm_config.model_config.get_hidden_size())
        info["dtype"] = str(self.vllm_config.model_config.dtype).removeprefix("torch.")
        return info

    def fc_register(self, jobs: list) -> int:
        fc = getattr(self, "_fc", None)
        return fc.register(jobs) if fc is not None else 0

    def fc_drain(self, timeout: float | None = None) -> dict | None:
        fc = getattr(self, "_fc", None)
        return fc.drain(timeout) if fc is not None else None

    def fc_close(self) -> None:
        fc = getattr(self, "_fc", None)
        if fc is not None:
            fc.close()
            self._fc = None


# ----------------------------------------------------------------------------------------------
# driver side
# ----------------------------------------------------------------------------------------------
def make_llm(model_dir: str | os.PathLike, *, max_model_len: int, tensor_parallel_size: int = 1,
             dtype: str = "auto", gpu_memory_utilization: float = 0.9,
             max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
             **kwargs: Any) -> Any:
    """An ``LLM`` set up for the fast capture path (prefix caching off, eager, our extension)."""
    from vllm import LLM

    args: dict[str, Any] = dict(
        model=str(model_dir),
        worker_extension_cls=EXTENSION,
        enable_prefix_caching=False,
        enforce_eager=True,
        max_model_len=int(max_model_len),
        tensor_parallel_size=int(tensor_parallel_size),
        dtype=dtype,
        gpu_memory_utilization=float(gpu_memory_utilization),
        skip_tokenizer_init=True,
    )
    if max_num_batched_tokens:
        args["max_num_batched_tokens"] = int(max_num_batched_tokens)
    if max_num_seqs:
        args["max_num_seqs"] = int(max_num_seqs)
    args.update(kwargs)
    return LLM(**args)


def _rank0(results: Any) -> Any:
    if isinstance(results, list):
        for r in results:
            if r is not None:
                return r
        return None
    return results


def run_fast(llm: Any, samples: Iterable[tuple[int, Sequence[int], Sequence[int]]], out_dir: str | os.PathLike,
             layer_ids: Sequence[int], batch_size: int = 256, resume: bool = True,
             writer_threads: int = 8, write_mode: str = "raw", fsync: bool = True,
             max_pending_bytes: int = 8 << 30, max_model_len: int | None = None) -> dict:
    """Capture ``samples`` with an ``LLM`` made by :func:`make_llm`; return a small summary."""
    from vllm import SamplingParams

    try:
        from vllm.inputs import TokensPrompt
    except ImportError:  # pragma: no cover
        TokensPrompt = dict  # type: ignore[assignment,misc]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    clean_temporaries(out_dir)
    setup = _rank0(llm.collective_rpc("fc_setup", args=(list(layer_ids), writer_threads, write_mode,
                                                        fsync, max_pending_bytes)))
    hidden = int(setup["hidden_size"])
    skipped: list[int] = []
    rejected: list[list] = []
    submitted = 0
    tokens = 0

    def flush(batch: list) -> None:
        nonlocal submitted, tokens
        if not batch:
            return
        llm.collective_rpc("fc_register", args=([(i, ids, lm, str(sample_path(out_dir, i)))
                                                 for i, ids, lm in batch],))
        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for _, ids, _ in batch]
        params = [SamplingParams(max_tokens=1, detokenize=False, extra_args={EXTRA_KEY: int(i)})
                  for i, _, _ in batch]
        llm.generate(prompts, params, use_tqdm=False)
        submitted += len(batch)
        tokens += sum(len(ids) for _, ids, _ in batch)

    batch: list = []
    seen: set[int] = set()
    for index, input_ids, loss_mask in samples:
        index = int(index)
        ids = [int(x) for x in input_ids]
        lm = [int(x) for x in loss_mask]
        if index in seen:
            rejected.append([index, "duplicate index"])
            continue
        seen.add(index)
        if len(ids) == 0 or len(ids) != len(lm):
            rejected.append([index, "empty sample or loss_mask length differs from input_ids"])
            continue
        if max_model_len is not None and len(ids) > max_model_len - 1:
            rejected.append([index, f"longer than max_model_len - 1 ({len(ids)} tokens)"])
            continue
        if resume and valid_sample_file(sample_path(out_dir, index), ids, len(layer_ids), hidden):
            skipped.append(index)
            continue
        batch.append((index, ids, lm))
        if len(batch) >= batch_size:
            flush(batch)
            batch = []
    flush(batch)
    worker = _rank0(llm.collective_rpc("fc_drain", args=(None,))) or {}
    fsync_dir(out_dir)
    wall = time.perf_counter() - t0
    summary = {
        "submitted": submitted,
        "skipped_existing": len(skipped),
        "rejected": rejected,
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else None,
        "setup": setup,
        **worker,
    }
    llm.collective_rpc("fc_close")
    return summary


def extract_fast(model_dir: str | os.PathLike, samples: Iterable[tuple[int, Sequence[int], Sequence[int]]],
                 out_dir: str | os.PathLike, layer_ids: Sequence[int], batch_size: int = 256,
                 max_model_len: int = 4096, tensor_parallel_size: int = 1, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int | None = None,
                 resume: bool = True, writer_threads: int = 8, write_mode: str = "raw",
                 fsync: bool = True, **llm_kwargs: Any) -> dict:
    """Extract hidden states of ``samples`` (``(index, input_ids, loss_mask)``) into ``out_dir``.

    Writes ``out_dir/data_{index}.pt`` per sample (speculators' format), skipping indexes whose
    file already exists and is valid. Returns counts, bad samples and timings (no tensors).
    """
    llm = make_llm(model_dir, max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                   dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                   max_num_batched_tokens=max_num_batched_tokens, **llm_kwargs)
    try:
        return run_fast(llm, samples, out_dir, layer_ids, batch_size=batch_size, resume=resume,
                        writer_threads=writer_threads, write_mode=write_mode, fsync=fsync,
                        max_model_len=max_model_len)
    finally:
        del llm
