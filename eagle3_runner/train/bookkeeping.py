"""What training watches: held-out acceptance every N steps (the best draft is the one saved), and
the step time with an ETA.

The loss says little about acceptance (a draft can lower its KL and still miss the verifier's
top-1), so the held-out split is scored with ``eagle3 eval``'s own code
(:class:`~eagle3_runner.evaluate.Scorer`) every ``eval_every`` steps and once more at the end;
the weights with the highest mean acceptance length are restored before speculators'
checkpointer saves, and every score goes to ``CKPT/evals.jsonl``.  Picking the best on the split
that ``eval.json`` then reports favours it slightly; ``serve-check --prompts`` on prompts of
another source is the unbiased number.  Single process only (under FSDP no rank holds the whole
draft), so ``--nproc > 1`` keeps the last weights.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

EVALS = "evals.jsonl"


def default_eval_every(steps: int) -> int:
    """Five evaluations over a run (and the final one)."""
    return max(1, steps // 5)


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class StepClock:
    """Seconds per step and the ETA, logged every ``every`` steps (the first step, which compiles,
    is left out of the rate)."""

    def __init__(self, total: int, every: int | None = None) -> None:
        self.total, self.every = total, every or max(1, total // 50)
        self.first: float | None = None
        self.started = time.monotonic()

    def tick(self, step: int, loss: float) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
            logger.info("step %d/%d loss %.4f (first step: %.1f s)", step + 1, self.total, loss, now - self.started)
            return
        if (step + 1) % self.every and step + 1 != self.total:
            return
        rate = (now - self.first) / max(step, 1)
        logger.info("step %d/%d loss %.4f, %.3f s/step, ETA %s", step + 1, self.total, loss, rate,
                    _fmt(rate * (self.total - step - 1)))


class BestKeeper:
    """Scores the draft in training every ``every`` steps on the held-out files; keeps the best."""

    def __init__(self, scorer: Any, every: int, log_path: Path, autocast: Any = None) -> None:
        self.scorer, self.every, self.log_path = scorer, every, Path(log_path)
        self.autocast = autocast
        self.best: tuple[float, int, dict[str, Any]] | None = None  # (mean length, step, CPU weights)
        self.last_step = 0
        self.history: list[dict[str, Any]] = []
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("", encoding="utf-8")

    def maybe(self, model: Any, step: int) -> None:
        if step - self.last_step >= self.every:
            self.evaluate(model, step)

    def evaluate(self, model: Any, step: int) -> float:
        import contextlib

        self.last_step = step
        t0 = time.monotonic()
        with self.autocast or contextlib.nullcontext():
            report = self.scorer.score(model)
        length = report.mean_acceptance_length
        entry = {"step": step, "mean_acceptance_length": length, "acceptance_per_position": report.acceptance_per_position,
                 "drafts": report.walk.drafts, "seconds": time.monotonic() - t0}
        self.history.append(entry)
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
        if self.best is None or length > self.best[0]:
            state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            self.best = (length, step, state)
        logger.info("step %d: held-out mean acceptance length %.3f (%s; best %.3f at step %d; %.1f s)", step, length,
                    " / ".join(f"{100 * a:.1f}%" for a in report.acceptance_per_position), self.best[0], self.best[1],
                    entry["seconds"])
        return length

    def restore_best(self, model: Any, step: int) -> None:
        """Score the final weights, then put the best weights seen back into ``model``."""
        if not self.history or self.history[-1]["step"] != step:
            self.evaluate(model, step)
        assert self.best is not None
        if self.best[1] != step:
            logger.info("keeping the weights of step %d (mean acceptance length %.3f) over the last step's %.3f",
                        self.best[1], self.best[0], self.history[-1]["mean_acceptance_length"])
            model.load_state_dict(self.best[2])

    @property
    def best_step(self) -> int | None:
        return self.best[1] if self.best else None


def keeping_best(base: type, keeper: BestKeeper) -> type:
    """``base`` (a speculators ``Trainer`` class) that restores the keeper's best weights before saving."""

    class BestTrainer(base):  # type: ignore[misc, valid-type]
        def save_checkpoint(self, epoch: int) -> None:
            keeper.restore_best(self.model, self.global_step)
            super().save_checkpoint(epoch)

    return BestTrainer
