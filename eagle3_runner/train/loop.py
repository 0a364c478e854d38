"""The fast training loop (``eagle3 train --loop fast``): speculators' Trainer, with its epoch
loop and optimizer set-up replaced, running the same ``Eagle3DraftModel.forward``.

What differs from speculators' ``Trainer.train_epoch`` (``speculators/train/trainer.py``), and why:

* batches come from :mod:`eagle3_runner.train.data` (worker processes, pinned memory, the next
  batch copied to the device on a side stream while the current one trains) instead of a
  single-process loader whose ``.to(device, non_blocking=True)`` copies from pageable memory;
* ``precision="bf16"``: the forward runs under ``torch.autocast(bfloat16)``; weights, gradients
  and AdamW state stay float32 (speculators trains float32 on one GPU; its FSDP path already
  computes in bf16, ``MixedPrecisionPolicy(param_dtype=bfloat16)``);
* AdamW runs fused on CUDA (one kernel over all parameters instead of per-tensor loops), with
  speculators' own optimizer, learning rate and schedule (its ``setup_optimizer`` runs);
* the per-step metrics are read back (``.item()``, a device sync) one step late, so the host
  queues step ``n + 1`` while the GPU runs step ``n``; they are logged exactly as speculators
  logs them (``speculators.metrics``, same record), so ``loss.jsonl`` is written the same way;
* ``torch.compile`` (speculators' decorator on ``forward``) stays on for CUDA: FlexAttention is
  only fast compiled (the caller decides, :func:`wants_compile`).

Everything else (model, loss, gradient clipping at 1.0, scheduler, checkpointing) is speculators'.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Any

logger = logging.getLogger(__name__)
metric_logger = logging.getLogger("speculators.metrics")

LOOPS = ("auto", "fast", "speculators")


def resolve_loop(loop: str, device: str) -> str:
    """``auto``: the fast loop on CUDA (about 10x speculators' on an H200), speculators' on the CPU
    (where the fast loop has nothing to gain: no bf16, no fused AdamW, no copies to overlap)."""
    if loop == "auto":
        return "fast" if device == "cuda" else "speculators"
    return loop
PRECISIONS = ("auto", "bf16", "fp32")


def resolve_precision(precision: str, device: str) -> str:
    """``auto``: bf16 autocast on CUDA, float32 on the CPU (bf16 matmuls are slow on most CPUs)."""
    if precision == "auto":
        return "bf16" if device == "cuda" else "fp32"
    return precision


def wants_compile(loop: str, device: str, compile_flag: bool) -> bool:
    """Whether speculators' ``torch.compile`` stays on: asked for, or the fast loop on CUDA."""
    return compile_flag or (loop == "fast" and device == "cuda")


def loader_workers(cpu_count: int | None) -> int:
    """Worker processes for the sample loader: enough to keep a GPU fed, leaving cores free."""
    return max(1, min(8, (cpu_count or 2) // 2))


def fast_setup(trainer_cls: type, files: list[str], batch_sampler: Any, *, max_len: int, num_layers: int,
               hidden_size: int, device: str, precision: str, transform: Any,
               deadline: float | None = None) -> tuple[Any, type]:
    """The fast loop's loader (for the same batch sampler) and trainer class (from ``trainer_cls``)."""
    import os

    from .data import fast_loader

    loader = fast_loader(files, batch_sampler, max_len=max_len, num_layers=num_layers, hidden_size=hidden_size,
                         workers=loader_workers(os.cpu_count()), pin_memory=device == "cuda")
    return loader, fast_trainer(trainer_cls, precision=resolve_precision(precision, device), transform=transform,
                                deadline=deadline)


def fitted_lr_scale(kind: str, step: int, total: int, warmup: int, time_used: float) -> float | None:
    """The learning rate's share of its peak at ``step`` under a time limit.  The run's progress is
    the larger of the share of its planned ``total`` steps done and ``time_used`` (the share of the
    limit spent since the first step); warm-up over the first ``warmup / total`` of it, then the
    decay (``linear`` or ``cosine``, as speculators' schedules) to 0 at its end.  Without time
    pressure this is speculators' own schedule; None for one without decay (``none``).

    So a run the limit stops still ends annealed: on the H100 (2026-12-05) a 2.5-minute limit
    stopped 6 planned epochs at step 564 of 2,820 (the first step's compile took 90 s), with the
    rate still near its peak."""
    if kind not in ("linear", "cosine"):
        return None
    progress, w = min(1.0, max(step / total, time_used)), warmup / total
    if progress < w:
        return progress / w
    x = (progress - w) / (1 - w) if w < 1 else 1.0
    return 1 - x if kind == "linear" else 0.5 * (1 + math.cos(math.pi * x))


def fast_trainer(base: type, *, precision: str, transform: Any = None, deadline: float | None = None) -> type:
    """``base`` (speculators' ``Trainer`` or a subclass) with the fast epoch loop; its
    ``train_loader`` must yield packed CPU batches (:func:`~eagle3_runner.train.data.fast_loader`),
    which a :class:`~eagle3_runner.train.data.DevicePrefetcher` moves to the device.  At
    ``deadline`` (``time.monotonic()``) the loop stops after the step in flight; the checkpoint
    is saved as at the end.  With a deadline the learning rate follows :func:`fitted_lr_scale`, so
    the schedule ends by the deadline when the planned steps would not."""

    class FastTrainer(base):  # type: ignore[misc, valid-type]
        step_seconds: list[float]

        def setup_model(self) -> None:
            super().setup_model()
            if precision == "bf16" and not self.is_distributed:
                import torch

                # The frozen verifier embeddings in bf16 (as FSDP's bf16 policy has them): the
                # first layer's input cat(embeds, fc(h)) is then bf16, so are the rotary tables
                # taken from its dtype, and q/k/v reach FlexAttention in one dtype (fp32 embeds
                # would promote q and k to fp32 next to a bf16 v).  Checkpoints are saved in bf16
                # by speculators either way.
                self.model.embed_tokens.to(torch.bfloat16)

        def setup_optimizer(self) -> None:
            super().setup_optimizer()
            import torch

            cuda = all(p.device.type == "cuda" for g in self.opt.param_groups for p in g["params"])
            if cuda and not self.is_distributed:  # fused AdamW: one kernel for all tensors
                for group in self.opt.param_groups:
                    group["fused"], group["foreach"] = True, False
            self.autocast = torch.autocast(
                device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

        def train_epoch(self, epoch: int) -> None:
            import torch

            from .data import DevicePrefetcher

            self.model.train()
            if hasattr(self.train_loader.batch_sampler, "set_epoch"):
                self.train_loader.batch_sampler.set_epoch(epoch)
            pending: deque[tuple[int, dict[str, Any], float]] = deque()
            self.step_seconds = []
            params = [p for p in self.model.parameters() if p.requires_grad]
            prefetcher = DevicePrefetcher(self.train_loader, self.local_rank, torch.float32, transform)
            last = time.perf_counter()
            first_done = None  # the schedule's time runs from the first step (its compile excluded)
            cfg = self.config
            for batch in prefetcher:
                if deadline is not None and time.monotonic() > deadline:
                    logger.warning("the time limit is reached after %d of %d steps: stopping here",
                                   self.global_step, len(prefetcher))
                    break
                with self.autocast:
                    _draft_tokens, loss, metrics = self.model(**batch, **self.config.train_call_kwargs)
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                self.opt.step()
                current_lr = self.opt.param_groups[0]["lr"]
                if self.scheduler is not None:
                    self.scheduler.step()
                if deadline is not None:
                    now = time.monotonic()
                    first_done = first_done or now
                    used = (now - first_done) / max(deadline - first_done, 1e-9)
                    scale = fitted_lr_scale(cfg.scheduler_type, self.global_step + 1, cfg.scheduler_total_steps,
                                            cfg.scheduler_warmup_steps, used)
                    for group in self.opt.param_groups if scale is not None else ():
                        group["lr"] = group.get("initial_lr", group["lr"]) * scale
                if self.is_distributed:
                    import torch.distributed as dist

                    for v in metrics.values():
                        dist.reduce(v, dst=0, op=dist.ReduceOp.AVG)
                pending.append((self.global_step, metrics, current_lr))
                self.global_step += 1
                if len(pending) > 1:  # read the previous step's metrics: the GPU is busy with this one
                    self._log(epoch, *pending.popleft())
                now = time.perf_counter()
                self.step_seconds.append(now - last)
                last = now
            while pending:
                self._log(epoch, *pending.popleft())

        def _log(self, epoch: int, step: int, metrics: dict[str, Any], lr: float) -> None:
            values = {k: v.item() for k, v in metrics.items()}
            metric_logger.info({"train": values, "epoch": epoch, "lr": lr}, extra={"step": step})

    return FastTrainer
