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
from pathlib import Path
from typing import Any

from .acceptance import Acceptance, EvalReport, leading_matches, score_sample  # noqa: F401 - re-exported
from ..common.errors import BadInput, UsageError
from ..common.formats import TRAIN_CONFIG, iter_sample_files
from ..common.model_folder import check_model_folder
from ..common.verifier_head import load_tensors, verifier_greedy, verifier_head  # noqa: F401 - re-exported

logger = logging.getLogger(__name__)

EVAL_FILE = "eval.json"


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


def pack_groups(lengths: list[int], pack_tokens: int) -> list[list[int]]:
    """Consecutive samples grouped into forwards of at most ``pack_tokens`` tokens (a longer
    sample alone); ``pack_tokens <= 0``: one sample per forward."""
    groups: list[list[int]] = []
    size = 0
    for i, n in enumerate(lengths):
        if groups and pack_tokens > 0 and size + n <= pack_tokens:
            groups[-1].append(i)
            size += n
        else:
            groups.append([i])
            size = n
    return groups


# Tokens per scoring forward: on CUDA many samples are packed into one forward (document masks
# keep them apart, as in training), since one small eager forward per sample spent ~0.2 s on the
# H200 (512 held-out samples: 101 s); on the CPU the dense mask grows with the square of a pack.
PACK_TOKENS = {"cuda": 8192, "cpu": 0}


class Scorer:
    """Scores drafts on fixed samples: the samples and the verifier's head are loaded once, so a
    draft in training can be scored every few steps (:mod:`eagle3_runner.train.bookkeeping`)."""

    def __init__(self, files: list[Path], verifier: Path, device: str, k: int, pack_tokens: int | None = None) -> None:
        import torch

        from ..common.draft_model import _import_speculators

        if k < 1:
            raise UsageError("-k must be at least 1")
        self.files, self.verifier, self.device, self.k = list(files), Path(verifier), device, k
        head = verifier_head(self.verifier)
        self.norm_w, self.head_w, self.eps = head[0].to(device), head[1].to(device), head[2]
        # speculators' dataset loads and shifts each sample as training does; loaded again at each
        # score (a held-out split of a large verifier does not fit in memory as float32)
        self.dataset = _import_speculators()["Eagle3SampleFileDataset"](
            max_len=10**9, file_list=[str(f) for f in self.files])
        from ..common.formats import load_sample

        lengths = {i: int(load_sample(f)["input_ids"].shape[0]) - 1 for i, f in enumerate(self.files)}  # mmap: cheap
        kept = [i for i, n in lengths.items() if n >= 2]
        packed = pack_groups([lengths[i] for i in kept],
                             PACK_TOKENS.get(str(device).split(":")[0], 0) if pack_tokens is None else pack_tokens)
        self.groups = [[kept[j] for j in g] for g in packed]
        self._greedy: dict[int, Any] = {}  # the verifier's tokens per sample, computed once
        self.torch = torch

    def _forward(self, model: Any, group: list[int]) -> list[list[Any]]:
        """Each sample of ``group`` with its draft tokens (verifier ids): one ``[T]`` tensor per TTT step."""
        torch = self.torch
        parts = [self.dataset[i] for i in group]
        cat = {key: torch.cat([p[key] for p in parts]).to(self.device) for key in ("hidden_states", "input_ids",
                                                                              "position_ids")}
        lengths = torch.tensor([p["input_ids"].shape[0] for p in parts], device=self.device)
        out = model(hidden_states=cat["hidden_states"][None].float(), input_ids=cat["input_ids"][None], lengths=lengths,
                    position_ids=cat["position_ids"][None], ttt_steps=self.k)
        d2t = model.d2t.to(self.device)
        ids = [(d + d2t[d])[0].cpu() for d in out]  # draft vocab -> verifier ids
        bounds = [0, *torch.cumsum(lengths, 0).tolist()]
        return [(parts[j], [step[bounds[j]:bounds[j + 1]] for step in ids]) for j in range(len(parts))]

    def score(self, model: Any, draft_name: str = "") -> EvalReport:
        """``model`` (an ``Eagle3DraftModel`` on ``device``) drafting ``k`` tokens from every start."""
        torch = self.torch
        all_positions, walk = Acceptance(), Acceptance()
        covered = counted = 0
        t2d = model.t2d.to(self.device)
        was_training = model.training
        model.eval()
        # Scored eagerly: FlexAttention refuses an eager block mask padded past the pack's length,
        # so the dense-mask SDPA attention (any device) runs the same masks.
        from ..common.cpu_attention import register

        layer_cfg = model.config.transformer_layer_config
        attn, layer_cfg._attn_implementation = layer_cfg._attn_implementation, register()
        try:
            with torch.no_grad(), torch.compiler.set_stance("force_eager"):  # speculators compiles forward
                for group in self.groups:
                    for idx, (s, draft_ids) in zip(group, self._forward(model, group)):
                        if idx not in self._greedy:
                            self._greedy[idx] = verifier_greedy(s["verifier_last_hidden_states"].to(self.device),
                                                                self.norm_w, self.head_w, self.eps).cpu()
                        v_ids = self._greedy[idx]
                        mask = s["loss_mask"].bool()
                        counted += int(mask.sum())
                        covered += int(t2d[v_ids.to(self.device)][mask.to(self.device)].sum())
                        score_sample(draft_ids, v_ids, mask, self.k, all_positions, walk)
        finally:
            layer_cfg._attn_implementation = attn
            model.train(was_training)
        if not all_positions.drafts:
            raise BadInput("no sample has a generated (loss-masked) token to draft after")
        return EvalReport(draft_name, str(self.verifier), self.k, len(self.files), all_positions, walk,
                          covered / counted if counted else 0.0)


def evaluate(draft: Path, data: Path | None = None, verifier: Path | None = None, k: int | None = None,
             device: str = "cpu", files: list[Path] | None = None) -> EvalReport:
    """Offline acceptance of ``draft`` on the samples of ``data`` (default: its held-out split)."""
    from ..common.cpu_attention import attention_for
    from ..common.draft_model import load_draft

    ckpt, train_out = resolve_checkpoint(draft)
    if files is None:
        files = [p for _, p in iter_sample_files(data)] if data else heldout_files(train_out)
    if not files:
        raise BadInput(f"no data_*.pt samples in {data}")
    model = load_draft(ckpt, verifier=verifier)
    config = model.config
    k = k or int(config.speculators_config.proposal_methods[0].speculative_tokens)
    verifier = check_model_folder(verifier or config.speculators_config.verifier.name_or_path, tokenizer=False,
                                  what="verifier")
    config.transformer_layer_config._attn_implementation = attention_for(device)
    report = Scorer(files, verifier, device, k).score(model.to(device), str(ckpt))
    logger.info("offline acceptance per position %s, mean acceptance length %.2f (all starts %s)",
                [round(x, 3) for x in report.acceptance_per_position], report.mean_acceptance_length,
                [round(x, 3) for x in report.all_positions.per_position])
    return report
