"""``eagle3 eval``: the acceptance vLLM should serve, predicted offline from training's own forward.

The draft runs exactly as speculators trains it: ``Eagle3SampleFileDataset`` loads and shifts each
sample (token ``x(t+1)`` with the states ``g(t)``), ``Eagle3DraftModel.forward`` unrolls ``K``
test-time-training steps (each step's input is the previous step's greedy token mapped through
``d2t``, its state the previous step's pre-norm output, positions advanced by one, attention over
the verifier-state keys plus the draft's own chain).  Its greedy tokens are compared with the
verifier's greedy token over the *full* vocabulary, ``argmax(lm_head(norm(h_N)))`` from the
extracted last layer (speculators' own metric ranks only the draft's rows and hides the tokens the
draft vocabulary lacks).

Per speculative position ``k = 1..K`` (position ``k`` counts only when ``1..k`` all match, as
vLLM's ``accepted_per_position / drafts``), over two sets of start positions:

* ``acceptance_per_position``: the starts greedy speculative decoding visits (the first draft
  after a turn's first generated token; after ``a`` accepted tokens the next draft starts ``a + 1``
  further): the walk vLLM makes when it serves the verifier's greedy output with this draft, so
  this is the prediction ``serve-check`` is compared with;
* ``all_positions``: every start inside a generated turn (the per-position accuracy against the
  verifier's full-vocabulary argmax; it weighs the start of a turn less than serving does).

``mean_acceptance_length`` is ``1 + sum(acceptance_per_position)``: tokens per verifier step.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import BadInput, UsageError
from .formats import TRAIN_CONFIG, iter_sample_files

logger = logging.getLogger(__name__)

EVAL_FILE = "eval.json"


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


def resolve_checkpoint(path: Path) -> tuple[Path, Path]:
    """(the draft folder holding config.json, the training output folder above it)."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path, path.parent
    if (path / "0" / "config.json").is_file():
        return path / "0", path
    raise BadInput(f"{path} holds no draft checkpoint (config.json, or 0/config.json)")


def heldout_files(train_output: Path) -> list[Path]:
    try:
        cfg = json.loads((Path(train_output) / TRAIN_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{train_output} has no readable {TRAIN_CONFIG}: give --data", ) from exc
    files = [Path(f) for f in cfg.get("val_files", [])]
    if not files:
        raise UsageError(f"{train_output} was trained without a held-out split: give --data")
    return files


def load_tensors(folder: Path, names: list[str]) -> dict[str, Any]:
    """The named tensors of a safetensors checkpoint (one file or an index of shards) that exist."""
    from safetensors import safe_open

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        where = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    elif (folder / "model.safetensors").is_file():
        where = dict.fromkeys(names, "model.safetensors")
    else:
        raise BadInput(f"{folder} holds no model.safetensors (or its index)")
    out: dict[str, Any] = {}
    for shard in sorted({where[n] for n in names if n in where}):
        with safe_open(str(folder / shard), framework="pt") as fh:
            out.update({n: fh.get_tensor(n) for n in names if where.get(n) == shard and n in fh.keys()})
    return out


def verifier_head(verifier: Path) -> tuple[Any, Any, float]:
    """The verifier's final norm weight, lm_head weight and norm epsilon (float32)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(verifier))
    cfg = getattr(cfg, "text_config", None) or cfg
    w = load_tensors(verifier, ["model.norm.weight", "lm_head.weight", "model.embed_tokens.weight"])
    head = w.get("lm_head.weight", w.get("model.embed_tokens.weight"))
    if "model.norm.weight" not in w or head is None:
        raise BadInput(f"{verifier}: no model.norm.weight / lm_head.weight to compute the verifier's tokens")
    return w["model.norm.weight"].float(), head.float(), float(getattr(cfg, "rms_norm_eps", 1e-6))


def verifier_greedy(last_layer: Any, norm_w: Any, head_w: Any, eps: float) -> Any:
    """``argmax(lm_head(norm(h_N)))`` per row: the verifier's greedy next token (full vocabulary)."""
    import torch

    h = last_layer.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * norm_w
    return (h @ head_w.T).argmax(-1)


class Scorer:
    """Scores drafts on fixed samples: the samples and the verifier's head are loaded once, so a
    draft in training can be scored every few steps (:mod:`eagle3_runner.train_eval`)."""

    def __init__(self, files: list[Path], verifier: Path, device: str, k: int) -> None:
        import torch

        from .draft_model import _import_speculators

        if k < 1:
            raise UsageError("-k must be at least 1")
        self.files, self.verifier, self.device, self.k = list(files), Path(verifier), device, k
        head = verifier_head(self.verifier)
        self.norm_w, self.head_w, self.eps = head[0].to(device), head[1].to(device), head[2]
        self.dataset = _import_speculators()["Eagle3SampleFileDataset"](
            max_len=10**9, file_list=[str(f) for f in self.files])
        self._greedy: dict[int, Any] = {}  # the verifier's tokens per sample, computed once
        self.torch = torch

    def score(self, model: Any, draft_name: str = "") -> EvalReport:
        """``model`` (an ``Eagle3DraftModel`` on ``device``) drafting ``k`` tokens from every start."""
        torch = self.torch
        all_positions, walk = Acceptance(), Acceptance()
        covered = counted = 0
        t2d, d2t = model.t2d.to(self.device), model.d2t.to(self.device)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad(), torch.compiler.set_stance("force_eager"):  # speculators compiles forward
                for idx in range(len(self.dataset)):
                    s = {key: v.to(self.device) for key, v in self.dataset[idx].items()}
                    if s["input_ids"].shape[0] < 2:
                        continue
                    out = model(hidden_states=s["hidden_states"][None], input_ids=s["input_ids"][None],
                                lengths=s["lengths"], position_ids=s["position_ids"][None], ttt_steps=self.k)
                    draft_ids = [(d + d2t[d])[0].cpu() for d in out]  # draft vocab -> verifier ids
                    if idx not in self._greedy:
                        self._greedy[idx] = verifier_greedy(s["verifier_last_hidden_states"], self.norm_w,
                                                            self.head_w, self.eps)
                    v_ids = self._greedy[idx]
                    mask = s["loss_mask"].bool()
                    counted += int(mask.sum())
                    covered += int(t2d[v_ids][mask].sum())
                    score_sample(draft_ids, v_ids.cpu(), mask.cpu(), self.k, all_positions, walk)
        finally:
            model.train(was_training)
        if not all_positions.drafts:
            raise BadInput("no sample has a generated (loss-masked) token to draft after")
        return EvalReport(draft_name, str(self.verifier), self.k, len(self.files), all_positions, walk,
                          covered / counted if counted else 0.0)


def evaluate(draft: Path, data: Path | None = None, verifier: Path | None = None, k: int | None = None,
             device: str = "cpu", files: list[Path] | None = None) -> EvalReport:
    """Offline acceptance of ``draft`` on the samples of ``data`` (default: its held-out split)."""
    from .cpu_attention import attention_for
    from .draft_model import load_draft

    ckpt, train_out = resolve_checkpoint(draft)
    if files is None:
        files = [p for _, p in iter_sample_files(data)] if data else heldout_files(train_out)
    if not files:
        raise BadInput(f"no data_*.pt samples in {data}")
    model = load_draft(ckpt, verifier=verifier)
    config = model.config
    k = k or int(config.speculators_config.proposal_methods[0].speculative_tokens)
    verifier = Path(verifier or config.speculators_config.verifier.name_or_path)
    config.transformer_layer_config._attn_implementation = attention_for(device)
    report = Scorer(files, verifier, device, k).score(model.to(device), str(ckpt))
    logger.info("offline acceptance per position %s, mean acceptance length %.2f (all starts %s)",
                [round(x, 3) for x in report.acceptance_per_position], report.mean_acceptance_length,
                [round(x, 3) for x in report.all_positions.per_position])
    return report
