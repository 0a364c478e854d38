"""``eagle3 train``: extracted samples + vocab -> a trained EAGLE-3 draft, through speculators.

Uses speculators' own pieces the way its training script does: ``Eagle3SpeculatorConfig`` /
``Eagle3DraftModel`` (draft config built from the verifier's config: a Llama decoder layer with
the verifier's sizes), ``Eagle3SampleFileDataset`` (v1 files: all layer ids but the last are
the draft's input, the last gives the teacher logits), speculators' multipack batch sampler,
``Trainer`` and its checkpointer.  Runner-side adaptations, none of them edits of speculators:

* ``--steps N``: the sampler yields exactly ``N`` packed batches (cycling the data over
  sampler epochs), and the trainer runs one epoch; the checkpoint is ``CKPT/0``.
* CPU: the device is passed to the trainer as ``"cpu"`` (it moves batches with
  ``.to(local_rank)``); attention runs through :mod:`eagle3_runner.common.cpu_attention` (FlexAttention
  has no CPU backward); ``torch.compile`` is off unless ``--compile``; under ``torchrun`` the
  process group uses gloo and FSDP's sharded layers are materialized on the CPU (speculators'
  trainer materializes them on CUDA).
* the loss of every step goes to ``CKPT/loss.jsonl`` (from speculators' metrics logger).

The checkpoint (speculators' format) embeds ``d2t``/``t2d``, names the verifier
(``speculators_config.verifier.name_or_path``) and the auxiliary layer ids
(``eagle_aux_hidden_state_layer_ids``), so vLLM can load it as an EAGLE-3 draft.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..common.draft_model import _import_speculators, draft_config, draft_layer_config, load_draft  # noqa: F401 - re-exported
from ..common.draft_model import drop_shared_embedding, zero_centred_verifier_norm
from ..common.errors import BadInput, EnvironmentProblem, UsageError
from ..common.formats import DATA_CONFIG, LOSS_LOG, TRAIN_CONFIG, iter_sample_files
from .vocab import load_vocab

logger = logging.getLogger(__name__)

DEFAULT_LR = 1e-3  # measured: see the README's "training recipe" (1e-4 does not flatten in short runs)
DEFAULT_WARMUP = 0.05  # share of the steps the learning rate warms up over
MAX_VAL_SAMPLES = 512  # the held-out split's cap: enough to measure acceptance, cheap to score often


@dataclass(frozen=True)
class TrainOptions:
    data: Path
    vocab: Path
    verifier: Path
    output: Path
    steps: int = 100
    device: str = "auto"  # cuda when torch sees a GPU, else cpu
    lr: float = DEFAULT_LR
    seed: int = 0
    num_layers: int = 1
    ttt_steps: int = 3
    ttt_step_loss_decay: float = 1.0
    max_len: int = 2048  # tokens per packed batch
    scheduler: str = "linear"
    noise_std: float = 0.0  # uniform noise on the input states (speculators' AddUniformNoise)
    compile: bool = False
    loop: str = "auto"  # "fast": eagle3_runner.train.loop; "speculators": its Trainer loop as is; auto: fast on CUDA
    precision: str = "auto"  # fast loop: "bf16" autocast (auto on CUDA) or "fp32" (auto on CPU)
    val_fraction: float = 0.1  # samples held out for acceptance (at most MAX_VAL_SAMPLES)
    epochs: float | None = None  # passes over the training samples; overrides steps when given
    warmup: float = DEFAULT_WARMUP  # warm-up: a share of the steps (< 1) or a number of steps
    eval_every: int | None = None  # held-out acceptance every N steps, best kept (None: 5 times; 0: off)
    max_minutes: float | None = None  # fast loop: end by this long (the schedule fitted to it too)


@dataclass
class TrainResult:
    checkpoint: Path
    losses: list[float] = field(default_factory=list)
    world_size: int = 1
    evaluation: Any = None  # evaluate.EvalReport on the held-out split (rank 0), or None
    steps: int = 0


def split_files(files: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, held-out): a seeded shuffle; at least one of each once there are two samples."""
    import random

    if not 0 <= fraction < 1:
        raise UsageError(f"--val-fraction must be in [0, 1), got {fraction}")
    order = sorted(files)
    random.Random(seed).shuffle(order)
    n_val = min(len(order) - 1, MAX_VAL_SAMPLES, max(1, round(fraction * len(order)))) \
        if fraction > 0 and len(order) > 1 else 0
    return sorted(order[n_val:]), sorted(order[:n_val])


class _LossRecorder(logging.Handler):
    """Receives speculators' per-step metrics records and appends them to ``loss.jsonl``; each
    step is also handed to ``on_step`` (the step clock, the held-out evaluation)."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        self.path = path
        self.losses: list[float] = []
        self.on_step: list[Any] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = path.open("w", encoding="utf-8")

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if not isinstance(msg, dict) or "train" not in msg:
            return
        metrics = msg["train"]
        step = getattr(record, "step", len(self.losses))
        self.losses.append(float(metrics["loss"]))
        self.fh.write(json.dumps({"step": step, "loss": metrics["loss"], "lr": msg.get("lr"), **{
            k: v for k, v in metrics.items() if k != "loss"}}) + "\n")
        self.fh.flush()
        for fn in self.on_step:
            fn(step, float(metrics["loss"]))

    def close(self) -> None:
        self.fh.close()
        super().close()


class _StepsSampler:
    """Exactly ``steps`` batches from a speculators batch sampler, cycling its epochs."""

    def __init__(self, inner: Any, steps: int) -> None:
        self.inner, self.steps = inner, steps

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int) -> None:  # the trainer calls this once (one epoch)
        pass

    def __iter__(self) -> Iterator[Any]:
        produced, epoch = 0, 0
        while produced < self.steps:
            self.inner.set_epoch(epoch)
            batches = list(iter(self.inner))
            if not batches:
                raise BadInput("no training batch could be formed from the samples")
            for b in batches:
                if produced == self.steps:
                    return
                yield b
                produced += 1
            epoch += 1


def _data_layer_ids(data: Path) -> list[int]:
    try:
        cfg = json.loads((Path(data) / DATA_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{data} has no readable {DATA_CONFIG} (run eagle3 extract first): {exc}") from None
    return list(cfg["layer_ids"])


def _setup_distributed(device: str) -> tuple[int, int, bool]:
    """(rank, world size, distributed) from torchrun's environment; gloo on CPU, nccl on CUDA."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, False
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return dist.get_rank(), world, True


def train(opts: TrainOptions) -> TrainResult:
    if opts.steps < 1 and opts.epochs is None:
        raise UsageError("--steps must be at least 1")
    if opts.device == "auto":
        from ..common.environment import has_gpu

        opts = replace(opts, device="cuda" if has_gpu() else "cpu")
    if opts.device not in ("cpu", "cuda"):
        raise UsageError("--device must be auto, cpu or cuda")
    from .loop import LOOPS, PRECISIONS, fast_setup, resolve_loop, wants_compile

    if opts.loop not in LOOPS or opts.precision not in PRECISIONS:
        raise UsageError(f"--loop must be one of {LOOPS}, --precision one of {PRECISIONS}")
    opts = replace(opts, loop=resolve_loop(opts.loop, opts.device))
    import torch

    if opts.device == "cuda" and not torch.cuda.is_available():
        raise EnvironmentProblem("--device cuda but no CUDA device is available")
    if not wants_compile(opts.loop, opts.device, opts.compile):
        import torch._dynamo

        torch._dynamo.config.disable = True  # speculators decorates forward with torch.compile
    import time

    started = time.monotonic()
    sp = _import_speculators()
    rank, world, distributed = _setup_distributed(opts.device)
    torch.manual_seed(opts.seed)

    layer_ids = _data_layer_ids(opts.data)
    if len(layer_ids) != 4:
        raise UsageError(f"EAGLE-3 needs 3 auxiliary layers + the last; the samples have layer ids {layer_ids}")
    files = [str(p) for _, p in iter_sample_files(opts.data)]
    if not files:
        raise BadInput(f"no data_*.pt samples in {opts.data}")
    files, val_files = split_files(files, opts.val_fraction, opts.seed)
    d2t, t2d = load_vocab(opts.vocab)

    from ..common.cpu_attention import attention_for

    attn = attention_for(opts.device)
    config = draft_config(opts.verifier, layer_ids[:-1], int(d2t.shape[0]), opts.ttt_steps, opts.num_layers, attn)
    model = sp["Eagle3DraftModel"](config=config, t2d=t2d, d2t=d2t)
    if zero_centred_verifier_norm(model, opts.verifier):
        logger.info("the verifier's final norm is zero-centred (x * (1 + weight)): the training targets use 1 + weight")

    transform = sp["AddUniformNoise"](std=opts.noise_std, tensors=("hidden_states",)) if opts.noise_std else None
    dataset = sp["Eagle3SampleFileDataset"](max_len=opts.max_len, file_list=files, transform=transform)
    inner = sp["MultipackDistributedBatchSamplerV2"](
        batch_max_length=opts.max_len, lengths=dataset.approx_lengths, num_replicas=world, rank=rank, seed=opts.seed
    )
    from torch.utils.data import DataLoader

    steps = resolve_steps(opts, inner)
    batches = _StepsSampler(inner, steps)
    loader = DataLoader(dataset, batch_sampler=batches, collate_fn=sp["create_collate_fn"](opts.max_len))

    trainer_mod = sp["trainer_mod"]
    device: Any = "cpu" if opts.device == "cpu" else int(os.environ.get("LOCAL_RANK", "0"))
    trainer_config = trainer_mod.TrainerConfig(
        lr=opts.lr,
        num_epochs=1,
        save_path=str(opts.output),
        resume_from_checkpoint=False,
        is_distributed=distributed,
        local_rank=device,
        train_call_kwargs={"ttt_steps": opts.ttt_steps, "ttt_step_loss_decay": opts.ttt_step_loss_decay,
                           "use_off_policy_tokens": False},
        val_call_kwargs={"ttt_steps": opts.ttt_steps, "ttt_step_loss_decay": opts.ttt_step_loss_decay},
        scheduler_type=opts.scheduler,
        scheduler_warmup_steps=warmup_steps(opts.warmup, steps),
        scheduler_total_steps=steps,
    )
    from .bookkeeping import EVALS, BestKeeper, StepClock, default_eval_every, keeping_best

    recorder = _LossRecorder(Path(opts.output) / LOSS_LOG) if rank == 0 else None
    keeper = None
    progress = None
    if recorder:
        from ..common.progress import bar

        progress = bar(steps, "train", "step")  # one bar for both loops, fed by the loss log
        recorder.on_step.append(StepClock(steps).tick)
        recorder.on_step.append(lambda _step, loss: (progress.set_postfix(loss=f"{loss:.3f}", refresh=False),
                                                     progress.update(1)))
    every = default_eval_every(steps) if opts.eval_every is None else opts.eval_every
    if every < 0:
        raise UsageError(f"--eval-every must be >= 0, got {every}")
    if rank == 0 and val_files and not distributed and every > 0:
        from ..evaluate import Scorer

        keeper = BestKeeper(Scorer([Path(f) for f in val_files], Path(opts.verifier), opts.device, opts.ttt_steps),
                            every, Path(opts.output) / EVALS)
    metrics_logger = logging.getLogger("speculators.metrics")
    if recorder:
        metrics_logger.addHandler(recorder)
        metrics_logger.setLevel(logging.INFO)
    try:
        trainer_cls = _cpu_trainer(trainer_mod.Trainer, sp["apply_fully_sharded"]) if opts.device == "cpu" else trainer_mod.Trainer
        if opts.loop == "fast":
            loader, trainer_cls = fast_setup(trainer_cls, files, batches, max_len=opts.max_len, num_layers=len(layer_ids),
                                             hidden_size=config.transformer_layer_config.hidden_size, device=opts.device,
                                             precision=opts.precision, transform=transform,
                                             deadline=started + 60 * opts.max_minutes if opts.max_minutes else None)
        elif opts.max_minutes:
            raise UsageError("--max-minutes needs --loop fast")
        if keeper:
            trainer_cls = keeping_best(trainer_cls, keeper)
        trainer = trainer_cls(model, trainer_config, loader, None)
        if keeper and recorder:
            keeper.autocast = getattr(trainer, "autocast", None)  # the fast loop's bf16 autocast
            recorder.on_step.append(lambda step, _loss: keeper.maybe(trainer.model, trainer.global_step))
        trainer.run_training()
    finally:
        if recorder:
            metrics_logger.removeHandler(recorder)
            recorder.close()
        if progress is not None:
            progress.close()
    checkpoint = Path(opts.output) / "0"
    if rank == 0:
        from ..common.atomic import write_json

        saved = drop_shared_embedding(checkpoint, Path(opts.verifier))
        if saved:
            logger.info("checkpoint: the embedding is the verifier's own, not saved again (%.1f MiB less; vLLM and "
                        "speculators read the verifier's)", saved / 2**20)

        write_json(Path(opts.output) / TRAIN_CONFIG, {
            "checkpoint": str(checkpoint.absolute()), "verifier": str(Path(opts.verifier).absolute()),
            "data": str(Path(opts.data).absolute()), "vocab": str(Path(opts.vocab).absolute()),
            "aux_layer_ids": layer_ids[:-1], "steps": steps, "epochs": opts.epochs, "lr": opts.lr,
            "warmup_steps": warmup_steps(opts.warmup, steps), "scheduler": opts.scheduler, "seed": opts.seed,
            "best_step": keeper.best_step if keeper else None,
            "device": opts.device, "world_size": world, "num_layers": opts.num_layers, "ttt_steps": opts.ttt_steps,
            "max_len": opts.max_len, "attention": attn, "loop": opts.loop, "precision": opts.precision,
            "train_samples": len(files),
            "val_fraction": opts.val_fraction, "val_files": [str(Path(f).absolute()) for f in val_files],
        })
    if distributed:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    evaluation = None
    if rank == 0 and val_files:
        evaluation = evaluate_heldout(opts.output, opts.device, opts.ttt_steps)
    return TrainResult(checkpoint, recorder.losses if recorder else [], world, evaluation, steps)


def warmup_steps(warmup: float, steps: int) -> int:
    """``warmup`` as steps: a share of ``steps`` when below 1, else a count (at least one step)."""
    if warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {warmup}")
    return max(1, min(steps, round(warmup * steps) if warmup < 1 else int(warmup)))


def resolve_steps(opts: TrainOptions, sampler: Any) -> int:
    """``opts.steps``, or ``epochs`` passes over the packed batches of one sampler epoch."""
    if opts.epochs is None:
        return opts.steps
    if opts.epochs <= 0:
        raise UsageError(f"--epochs must be > 0, got {opts.epochs}")
    import math

    sampler.set_epoch(0)
    per_epoch = sum(1 for _ in iter(sampler))
    if not per_epoch:
        raise BadInput("no training batch could be formed from the samples")
    steps = max(1, math.ceil(opts.epochs * per_epoch))
    logger.info("%g epochs of %d packed batches: %d steps", opts.epochs, per_epoch, steps)
    return steps


def evaluate_heldout(output: Path, device: str, k: int) -> Any:
    """Offline acceptance of the saved draft on its held-out split, written to ``OUTPUT/eval.json``."""
    from ..common.atomic import write_json
    from ..evaluate import EVAL_FILE, evaluate

    report = evaluate(Path(output), device=device, k=k)
    write_json(Path(output) / EVAL_FILE, report.to_dict())
    return report


def _cpu_trainer(base: type, apply_fully_sharded: Any) -> type:
    """speculators' Trainer, with its FSDP set-up materializing the sharded layers on the CPU."""

    class CpuTrainer(base):  # type: ignore[misc, valid-type]
        def setup_model(self) -> None:
            if not self.is_distributed:
                return super().setup_model()
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
            from torch.distributed.fsdp import FSDPModule

            # speculators moves the layers to "meta", shards them, and re-creates them with
            # reset_parameters(), which leaves modules without one (the RMSNorms) as
            # uninitialized memory.  Here every parameter gets rank 0's initial value instead.
            full = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            apply_fully_sharded(self.model)
            for m in self.model.layers.children():
                if isinstance(m, FSDPModule):
                    m.to_empty(device="cpu")
            set_model_state_dict(self.model, full, options=StateDictOptions(
                full_state_dict=True, broadcast_from_rank0=True, strict=False))
            return None

    return CpuTrainer


def read_losses(output: Path) -> list[float]:
    path = Path(output) / LOSS_LOG
    if not path.is_file():
        return []
    return [json.loads(line)["loss"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def checkpoint_is_complete(output: Path, steps: int | None = None) -> bool:
    ckpt = Path(output) / "0"
    if not ((ckpt / "config.json").is_file() and (ckpt / "model.safetensors").is_file()):
        return False
    return steps is None or len(read_losses(output)) >= steps
