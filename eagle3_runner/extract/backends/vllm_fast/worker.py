"""The fast path inside the vLLM worker: which requests to capture, and their files.

``CaptureWorkerExtension`` is mixed into vLLM's worker (``worker_extension_cls``); its methods
run through ``collective_rpc``.  The capture itself (hooks, step layout, pinned copies on a
side stream, the thread pool) is the shared mechanism of ``patches/shims/capture.py``; here
:class:`FastCapture` claims the requests the driver registered (each carries its sample index
in ``SamplingParams.extra_args``, so nobody guesses vLLM's request ids), validates every
finished sample (lengths, finite rows, captured ids == prompt, positions == 0..T-1) and writes
``OUT/data_{index}.pt`` atomically in the pool's threads.  Only TP rank 0 captures.
"""

from __future__ import annotations

import logging
from typing import Any

from patches.shims.capture import Job, StepCapture

from ....common.formats import sample_problems
from .files import write_sample_atomic

logger = logging.getLogger(__name__)

EXTENSION = "eagle3_runner.extract.backends.vllm_fast.worker.CaptureWorkerExtension"
EXTRA_KEY = "eagle3_fast_capture"  # SamplingParams.extra_args key holding the sample index


class FastCapture(StepCapture):
    """Registered samples -> validated files (TP rank 0 only)."""

    check_finite = True

    def __init__(self, worker: Any, layer_ids: list[int], writer_threads: int, write_mode: str, fsync: bool,
                 max_pending_bytes: int) -> None:
        super().__init__(worker, layer_ids, threads=writer_threads, max_pending_bytes=max_pending_bytes)
        self.hidden_size = int(worker.vllm_config.model_config.get_hidden_size())
        self.write_mode, self.fsync = write_mode, fsync
        self.registered: dict[int, Job] = {}  # sample index -> job, until its request is scheduled
        self.written = self.bytes_written = 0
        self.bad: list[list] = []

    def register(self, jobs: list) -> int:
        for index, input_ids, loss_mask, path in jobs:
            self.registered[int(index)] = Job(int(index), list(input_ids), payload=(list(loss_mask), str(path)))
        return len(jobs)

    def claim(self, request: Any) -> Job | None:
        extra = getattr(getattr(request, "sampling_params", None), "extra_args", None) or {}
        if EXTRA_KEY not in extra:
            return None
        job = self.registered.pop(int(extra[EXTRA_KEY]), None)
        if job is None:
            logger.warning("fast capture: request for unregistered sample %s", extra[EXTRA_KEY])
        return job

    def _sample(self, job: Job) -> dict:
        import torch

        return {"input_ids": torch.tensor(job.prompt, dtype=torch.long), "hidden_states": job.host,
                "loss_mask": torch.tensor(job.payload[0], dtype=torch.long)}

    def problem(self, job: Job) -> str | None:
        why = super().problem(job)
        if why is None:  # finite: checked per row on the device
            why = "; ".join(sample_problems(self._sample(job), num_layers=len(self.layer_ids),
                                            hidden_size=self.hidden_size, input_ids=job.prompt,
                                            check_finite=False)) or None
        return why

    def sink(self, job: Job) -> int:
        sample = self._sample(job)
        if self.write_mode == "none":  # benchmarking only: capture, copy, validate
            return sum(t.numel() * t.element_size() for t in (sample["input_ids"], *job.host, sample["loss_mask"]))
        return write_sample_atomic(job.payload[1], sample, self.write_mode, self.fsync)

    def done(self, job: Job, result: Any, problem: str | None) -> None:
        with self.lock:
            if problem is None:
                self.written += 1
                self.bytes_written += int(result)
            else:
                self.bad.append([job.key, problem])

    def finish(self, timeout: float | None = None) -> dict:
        """Wait for the pool, report samples that never completed, return the summary."""
        self.drain(timeout)
        for job in self.registered.values():
            self.bad.append([job.key, "no states captured (request never ran to the end of its prompt)"])
        self.registered.clear()
        with self.lock:
            s = self.stats
            out = {
                "written": self.written, "bytes_written": self.bytes_written, "bad": self.bad,
                "steps": s["steps"], "tokens_captured": s["tokens"], "t_write_s": s["t_sink_s"],
                "t_wait_copy_s": s["t_wait_copy_s"], "t_dispatch_s": s["t_dispatch_s"],
                "t_backpressure_s": s["t_backpressure_s"],
                "t_first_step_to_last_write_s": (self.last_done - self.first_step)
                if self.first_step and self.last_done else None,
                "writer_threads": len(self.threads), "write_mode": self.write_mode, "fsync": self.fsync,
            }
            self.written = self.bytes_written = 0
            self.bad = []
            self.stats = dict.fromkeys(s, 0)
            self.first_step = self.last_done = None
        return out


class CaptureWorkerExtension:
    """Mixed into vLLM's worker class; the ``fc_*`` methods run via ``collective_rpc``."""

    def fc_setup(self, layer_ids: list[int], writer_threads: int = 8, write_mode: str = "raw",
                 fsync: bool = True, max_pending_bytes: int = 8 << 30) -> dict:
        from vllm.distributed import get_tp_group

        self.fc_close()
        rank = get_tp_group().rank_in_group
        info = {"tp_rank": rank, "runner": type(self.model_runner).__module__}
        if rank != 0:  # the residual stream is replicated across TP ranks
            return info
        self._fc = FastCapture(self, list(layer_ids), writer_threads, write_mode, fsync, max_pending_bytes)
        config = self.vllm_config.model_config
        info.update(num_hidden_layers=self._fc.num_layers, device=str(self._fc.device),
                    hidden_size=int(config.get_hidden_size()), dtype=str(config.dtype).removeprefix("torch."))
        return info

    def fc_register(self, jobs: list) -> int:
        fc = getattr(self, "_fc", None)
        return fc.register(jobs) if fc is not None else 0

    def fc_drain(self, timeout: float | None = None) -> dict | None:
        fc = getattr(self, "_fc", None)
        return fc.finish(timeout) if fc is not None else None

    def fc_close(self) -> None:
        fc = getattr(self, "_fc", None)
        if fc is not None:
            fc.close()
            self._fc = None
