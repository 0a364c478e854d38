"""``eagle3 vocab``: what the verifier predicts -> the draft vocabulary (``d2t.npy``, ``t2d.npy``).

A draft token outside the draft vocabulary can never be accepted, and what has to be accepted is
the verifier's greedy token, not the data's next token (on data the verifier did not write, they
agree less than 1% of the time with a random verifier).  With ``--data HS_DIR`` (extract's
output), tokens are ranked first by how often they are the verifier's top-1 prediction on the
loss-masked positions (``argmax(lm_head(norm(h_N)))`` from the extracted last layer), then by
their frequency in the text (``--freq``); the share of the verifier's top-1 predictions the
draft vocabulary covers is reported and recorded.  Without ``--data``, by text frequency alone.

Speculators' format: ``d2t`` is a ``LongTensor[draft_vocab]`` of offsets
(``target_id = draft_id + d2t[draft_id]``), ``t2d`` a ``BoolTensor[target_vocab]`` marking the
target ids in the draft vocabulary; both saved with ``numpy.save`` as speculators' scripts do
(and load with ``numpy.load``).  The mapping is computed by speculators' own
``build_vocab_mappings_from_distribution`` when speculators is importable (patched); otherwise
by :func:`_build_mappings`, which follows it (most frequent ids first, ties by id, padded
with the lowest unused ids, sorted).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.atomic import write_json, write_with
from ..common.errors import BadInput, UsageError
from ..common.formats import read_freq
from ..common.model_folder import check_model_folder

logger = logging.getLogger(__name__)

D2T, T2D, VOCAB_CONFIG = "d2t.npy", "t2d.npy", "vocab_config.json"
AUTO_COVERAGE = 0.99  # the automatic draft vocabulary holds this share of the verifier's greedy tokens


@dataclass(frozen=True)
class VocabResult:
    output: Path
    draft_vocab_size: int
    target_vocab_size: int
    coverage: float  # share of counted (assistant) tokens the draft vocabulary covers
    implementation: str
    verifier_top1_coverage: float | None = None  # share of the verifier's greedy predictions covered


def _build_mappings(freq: dict[int, int], draft: int, target: int) -> tuple[Any, Any]:
    import torch

    ranked = sorted(freq, key=lambda t: (-freq[t], t))[:draft]
    chosen = set(ranked)
    for tid in range(target):
        if len(ranked) >= draft:
            break
        if tid not in chosen:
            ranked.append(tid)
    ranked.sort()
    d2t = torch.tensor(ranked, dtype=torch.long) - torch.arange(draft, dtype=torch.long)
    t2d = torch.zeros(target, dtype=torch.bool)
    t2d[ranked] = True
    return d2t, t2d


def _mapping_function() -> tuple[Any, str]:
    try:
        from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
    except Exception as exc:  # noqa: BLE001 - unpatched speculators fails in many ways on import
        logger.info("%s; using eagle3_runner's equivalent", import_failure("speculators.train.vocab_mapping", exc))
        return (lambda f, d, t: _build_mappings(f, d, t)), "eagle3_runner"
    return (
        lambda f, d, t: build_vocab_mappings_from_distribution(f, draft_vocab_size=d, target_vocab_size=t),
        "speculators.train.vocab_mapping",
    )


def import_failure(module: str, exc: BaseException) -> str:
    """Why ``module`` did not import, naming the real cause: a missing dependency is not a
    missing speculators (``datasets``, say, which speculators imports at the top of its package)."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    root = module.split(".")[0]
    if missing and missing.split(".")[0] != root:
        return f"{module} is not importable: it needs {missing!r}, which is not installed"
    if missing:
        return f"{module} is not importable: {root} is not installed"
    return f"{module} is not importable ({type(exc).__name__}: {exc})"


def auto_draft_vocab_size(counts: dict[int, int], target: int, share: float = AUTO_COVERAGE,
                          multiple: int = 1024) -> int:
    """The smallest multiple of ``multiple`` whose most frequent tokens hold ``share`` of ``counts``
    (the verifier's greedy predictions, else the text's frequencies), at most ``target``."""
    total = sum(counts.values())
    if not total:
        return min(target, multiple)
    need, held, size = share * total, 0, 0
    for c in sorted(counts.values(), reverse=True):
        if held >= need:
            break
        held += c
        size += 1
    return min(target, max(multiple, -(-size // multiple) * multiple))


def verifier_top1_counts(data: Path, verifier: Path | None = None, device: str = "auto") -> tuple[dict[int, int], Path]:
    """How often each token is the verifier's greedy prediction at a loss-masked position of the
    samples in ``data`` (whose last layer id must be the verifier's last layer); on the GPU when
    there is one (``auto``: the head over every masked row of a large run is a lot of arithmetic)."""
    import torch

    from ..common.verifier_head import verifier_greedy, verifier_head
    from ..common.formats import DATA_CONFIG, iter_sample_files, load_sample

    try:
        cfg = json.loads((Path(data) / DATA_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{data} has no readable {DATA_CONFIG} (run eagle3 extract first): {exc}") from None
    verifier = check_model_folder(verifier or cfg["model"], tokenizer=False, what="verifier")
    from transformers import AutoConfig

    vc = AutoConfig.from_pretrained(str(verifier))
    n_layers = (getattr(vc, "text_config", None) or vc).num_hidden_layers
    if cfg["layer_ids"][-1] != n_layers:
        raise BadInput(f"{data}: the last layer id is {cfg['layer_ids'][-1]}, not the verifier's last "
                       f"layer {n_layers}: its greedy tokens cannot be computed from these samples")
    if device == "auto":
        from ..common.environment import has_gpu

        device = "cuda" if has_gpu() else "cpu"
    norm_w, head_w, eps = verifier_head(verifier)
    norm_w, head_w = norm_w.to(device), head_w.to(device)
    counts = torch.zeros(head_w.shape[0], dtype=torch.long, device=device)
    for _, path in iter_sample_files(data):
        s = load_sample(path)
        mask = s["loss_mask"].bool()
        if mask.any():
            top1 = verifier_greedy(s["hidden_states"][-1][mask].to(device), norm_w, head_w, eps)
            counts += torch.bincount(top1, minlength=counts.shape[0])
    return {int(t): int(c) for t, c in enumerate(counts.cpu().tolist()) if c}, verifier


def rank_by_verifier(top1: dict[int, int], text: dict[int, int]) -> dict[int, int]:
    """One score per token that orders by top-1 count first, text frequency second."""
    scale = sum(text.values()) + 1
    return {t: top1.get(t, 0) * scale + text.get(t, 0) for t in set(top1) | set(text)}


def build_vocab(freq_file: Path, target_vocab_size: int | None, draft_vocab_size: int | None, output: Path,
                data: Path | None = None, verifier: Path | None = None) -> VocabResult:
    """``draft_vocab_size`` ``None``: :func:`auto_draft_vocab_size` of the verifier's greedy tokens
    (with ``data``), else of the text's frequencies."""
    freq, recorded_vocab = read_freq(freq_file)
    target = target_vocab_size or recorded_vocab
    if not target:
        raise UsageError("--target-vocab-size is needed (the frequency file does not record it)")
    if draft_vocab_size is not None and not 0 < draft_vocab_size <= target:
        raise UsageError(f"--draft-vocab-size must be in [1, {target}], got {draft_vocab_size}")
    out_of_range = sorted(t for t in freq if t >= target)
    if out_of_range:
        raise BadInput(f"{freq_file}: token ids {out_of_range[:5]} are outside the target vocabulary ({target})")
    top1: dict[int, int] = {}
    if data is not None:
        top1, verifier = verifier_top1_counts(data, verifier)
        if any(t >= target for t in top1):
            raise BadInput(f"{data}: the verifier predicts token ids outside the target vocabulary ({target})")
    auto = draft_vocab_size is None
    if draft_vocab_size is None:
        draft_vocab_size = auto_draft_vocab_size(top1 or freq, target)
        logger.info("draft vocabulary size %d: the smallest multiple of 1024 holding %.0f%% of the %s", draft_vocab_size,
                    100 * AUTO_COVERAGE, "verifier's greedy tokens" if top1 else "assistant tokens")
    build, impl = _mapping_function()
    d2t, t2d = build(rank_by_verifier(top1, freq) if top1 else freq, draft_vocab_size, target)
    import numpy as np

    output = Path(output)
    write_with(output / D2T, lambda fh: np.save(fh, d2t.cpu().numpy()))
    write_with(output / T2D, lambda fh: np.save(fh, t2d.cpu().numpy()))
    total = sum(freq.values())
    covered = sum(c for t, c in freq.items() if bool(t2d[t]))
    coverage = covered / total if total else 0.0
    top1_total = sum(top1.values())
    top1_coverage = sum(c for t, c in top1.items() if bool(t2d[t])) / top1_total if top1_total else None
    write_json(output / VOCAB_CONFIG, {
        "draft_vocab_size": draft_vocab_size,
        "draft_vocab_size_chosen": f"auto: {100 * AUTO_COVERAGE:.0f}% of the {'verifier top-1' if top1 else 'text'}"
                                   if auto else "given",
        "target_vocab_size": target,
        "coverage": coverage,
        "verifier_top1_coverage": top1_coverage,
        "ranked_by": "verifier top-1, then text frequency" if top1 else "text frequency",
        "freq": str(Path(freq_file).absolute()),
        "data": str(Path(data).absolute()) if data else None,
        "verifier": str(Path(verifier).absolute()) if data else None,
        "implementation": impl,
    })
    logger.info("draft vocabulary of %d/%d tokens covers %.1f%% of assistant tokens%s", draft_vocab_size, target,
                100 * coverage, f" and {100 * top1_coverage:.1f}% of the verifier's greedy predictions"
                if top1_coverage is not None else "")
    return VocabResult(output, draft_vocab_size, target, coverage, impl, top1_coverage)


def load_vocab(folder: Path) -> tuple[Any, Any]:
    """``(d2t, t2d)`` as torch tensors, checked against each other."""
    import numpy as np
    import torch

    folder = Path(folder)
    try:
        d2t = torch.from_numpy(np.load(folder / D2T)).long()
        t2d = torch.from_numpy(np.load(folder / T2D)).bool()
    except (OSError, ValueError) as exc:
        raise BadInput(f"{folder} does not hold d2t.npy/t2d.npy: {exc}") from None
    if int(t2d.sum()) != d2t.shape[0]:
        raise BadInput(f"{folder}: t2d marks {int(t2d.sum())} tokens, d2t has {d2t.shape[0]}")
    return d2t, t2d


def vocab_is_complete(folder: Path) -> bool:
    try:
        json.loads((Path(folder) / VOCAB_CONFIG).read_text())
        load_vocab(folder)
    except (OSError, ValueError, BadInput):
        return False
    return True
