"""Acceptance arithmetic: how many of a draft's tokens greedy speculative decoding keeps, per position.

Pure tensor bookkeeping, shared by ``eagle3 eval`` (offline prediction) and training's held-out
scoring; no model, no files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Acceptance:
    """Per-position acceptance: ``accepted[k]`` drafts whose positions ``1..k+1`` all matched."""

    drafts: int = 0
    accepted: list[int] = field(default_factory=list)

    def add(self, run: int, k: int) -> None:
        if not self.accepted:
            self.accepted = [0] * k
        self.drafts += 1
        for j in range(run):
            self.accepted[j] += 1

    @property
    def per_position(self) -> list[float]:
        return [a / self.drafts if self.drafts else 0.0 for a in self.accepted]

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + sum(self.per_position)

    def to_dict(self) -> dict[str, Any]:
        return {"drafts": self.drafts, "accepted_per_position": self.accepted,
                "acceptance_per_position": self.per_position,
                "mean_acceptance_length": self.mean_acceptance_length}


@dataclass
class EvalReport:
    draft: str
    verifier: str
    k: int
    samples: int
    all_positions: Acceptance
    walk: Acceptance
    vocab_coverage: float  # share of the verifier's greedy tokens (counted positions) in t2d

    @property
    def acceptance_per_position(self) -> list[float]:
        """The prediction of what vLLM serves: the walk's."""
        return self.walk.per_position

    @property
    def mean_acceptance_length(self) -> float:
        return self.walk.mean_acceptance_length

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("all_positions", "walk")}
        return {**d, "acceptance_per_position": self.acceptance_per_position,
                "mean_acceptance_length": self.mean_acceptance_length, "drafts": self.walk.drafts,
                "accepted_per_position": self.walk.accepted, "all_positions": self.all_positions.to_dict()}


def leading_matches(correct: Any, k: int) -> Any:
    """``run[i]``: how many of the draft's ``k`` tokens from start ``i`` match before the first miss.

    ``correct`` is a ``[k, T]`` bool tensor (``correct[j, i]``: step ``j`` from start ``i`` matched)."""
    import torch

    run = torch.zeros(correct.shape[1], dtype=torch.long)
    alive = torch.ones(correct.shape[1], dtype=torch.bool)
    for j in range(k):
        alive &= correct[j]
        run += alive.long()
    return run


def score_sample(draft_ids: list[Any], verifier_ids: Any, context_mask: Any, k: int,
                 all_positions: Acceptance, walk: Acceptance) -> None:
    """Add one sample's drafts to both tallies.

    After speculators' shift, index ``i`` holds token ``x(i+1)`` and ``context_mask[i]`` says
    whether ``x(i+1)`` was generated.  TTT step ``j`` at ``i`` predicts ``x(i+2+j)``, whose greedy
    value is ``verifier_ids[i+j]``.  A start ``i`` counts when ``x(i+1) .. x(i+1+k)`` all belong to
    one generated turn, so every drafted token has a known greedy value (``serve-check`` serves each
    turn with ``max_tokens = len(turn) - k + 1`` for the same reason: vLLM also scores draft tokens
    past ``max_tokens``).  The walk starts at each turn's first generated token and, after ``a``
    accepted tokens, moves ``a + 1`` further, as greedy speculative decoding does."""
    import torch

    t = verifier_ids.shape[0]
    mask = context_mask.bool()
    counted = torch.zeros(t, dtype=torch.bool)
    if t > k:
        counted[: t - k] = mask[: t - k]
        for j in range(1, k + 1):
            counted[: t - k] &= mask[j: t - k + j]
    correct = torch.zeros(k, t, dtype=torch.bool)
    for j in range(k):
        n = t - j
        correct[j, :n] = draft_ids[j][:n] == verifier_ids[j: j + n]
    run = leading_matches(correct, k)
    for i in torch.nonzero(counted).flatten().tolist():
        all_positions.add(int(run[i]), k)
    previous = torch.cat([mask.new_zeros(1), mask[:-1]])
    for i in torch.nonzero(mask & ~previous).flatten().tolist():  # each turn's first start
        while i < t and counted[i]:
            walk.add(int(run[i]), k)
            i += int(run[i]) + 1
