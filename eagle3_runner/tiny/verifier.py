"""A tiny verifier whose outputs can be learned: the tiny Llama, trained briefly on the tiny chat set.

A random-weight verifier is a poor judge of a draft: its next-token distributions are nearly
flat (mean entropy 6.19 nats against 6.24 uniform), so a draft can reach a low KL with the wrong
top-1 and acceptance says nothing.  Trained for a couple of minutes on the CPU on the structured
chat set of :mod:`eagle3_runner.tiny` (templated sentences inside the chat template), the same
architecture answers with peaked, structured text, the way real chat models do, so acceptance
measures how well the draft learned it.  Built offline and seeded; ``eagle3 run --tiny`` uses it.

``python -m eagle3_runner.tiny.verifier DEST [--steps N]`` builds one from the command line.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from . import tiny_chat_dataset

logger = logging.getLogger(__name__)

TRAINING_FILE = "verifier_training.json"
# Longer answers than the chat set's default: the first draft of a turn is the hardest to accept
# (it has to guess how the verifier opens its answer), so longer turns weigh it as serving does.
SENTENCES = (3, 6)


# A batch's rows sorted by length and cut into this many groups, each padded to its own longest,
# instead of one batch padded to its longest row (40% of its tokens padding): the whole build
# 103 -> 72 s for Llama on 2 cores (4 groups: 78 s, 8: 81 s)
MICRO_BATCHES = 2

_PROBE = "\x00TINY-PROBE\x00"


def backward_batch(model: Any, rows: list[list[int]], pad_id: int, groups: int = MICRO_BATCHES) -> float:
    """The gradient of the batch's mean next-token loss, accumulated in ``model``; returns the loss.

    Summed over micro-batches of similar lengths, each divided by the whole batch's label count:
    the same gradient as one padded batch (right padding under a causal mask changes no real
    token), with a fraction of its padding."""
    import torch

    items = sum(len(r) - 1 for r in rows)
    order = sorted(rows, key=len)
    size = -(-len(order) // groups)
    total = 0.0
    for start in range(0, len(order), size):
        part = order[start : start + size]
        width = max(map(len, part))
        ids = torch.full((len(part), width), pad_id)
        labels = torch.full((len(part), width), -100)
        for i, r in enumerate(part):
            ids[i, : len(r)] = labels[i, : len(r)] = torch.tensor(r)
        loss = model(input_ids=ids, labels=labels, num_items_in_batch=items).loss
        loss.backward()
        total += float(loss.detach())
    return total


def closes_last_turn_apart(tokenizer: Any) -> bool:
    """Whether the template ends the conversation's last assistant turn otherwise than one in the
    history: harmony ends the reply the model generates with ``<|return|>`` and writes ``<|end|>``
    when the turn is history; Llama's and Qwen3's templates close both alike."""
    def after(messages: list[dict]) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False).split(_PROBE, 1)[1]

    turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
    return not after([*turn, {"role": "user", "content": "hi"}]).startswith(after(turn))


def _encode(tokenizer, rows: list[dict]) -> list[list[int]]:  # noqa: ANN001
    """Each row rendered whole; with a template that closes the last turn apart (harmony), each
    row cut after every assistant turn instead, so that the verifier learns to end every reply as
    it ends a generated one (``<|return|>``), as gpt-oss does, rather than splitting the end
    between ``<|end|>`` and ``<|return|>`` and running on to the token limit."""
    apart = closes_last_turn_apart(tokenizer)
    out = []
    for r in rows:
        msgs = r["messages"]
        cuts = [k + 1 for k, m in enumerate(msgs) if m["role"] == "assistant"] if apart else [len(msgs)]
        for cut in cuts:
            ids = tokenizer.apply_chat_template(msgs[:cut], tokenize=True, return_dict=False)
            out.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))
    return out


def build_learnable_llama(dest: Path, seed: int = 0, steps: int = 120, batch: int = 16, lr: float = 3e-3,
                          rows: int = 2000) -> Path:
    """The tiny Llama (random init from ``seed``), trained ``steps`` AdamW steps on ``rows`` chat
    rows (next-token loss on every token, warm-up then linear decay) and saved in ``dest``."""
    return build_learnable(dest, "llama", seed=seed, steps=steps, batch=batch, lr=lr, rows=rows)


def build_learnable(dest: Path, arch: str = "llama", seed: int = 0, steps: int = 120, batch: int = 16,
                    lr: float = 3e-3, rows: int = 2000) -> Path:
    """The tiny verifier ``arch`` of :mod:`eagle3_runner.tiny.arch` (its own chat template),
    trained as :func:`build_learnable_llama` in float32 and saved in the architecture's dtype."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .arch import ARCHITECTURES, build

    dest = Path(dest)
    build(arch, dest, seed=seed)
    tok = AutoTokenizer.from_pretrained(str(dest))
    model = AutoModelForCausalLM.from_pretrained(str(dest), dtype=torch.float32)
    seqs = _encode(tok, tiny_chat_dataset(rows, seed=seed + 1000, sentences=SENTENCES))  # not eagle3 run's rows
    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 8)
    model.train()
    from ..common.progress import bar

    t0, losses = time.monotonic(), []
    progress = bar(steps, f"tiny verifier ({arch})", "step")
    for step in range(steps):
        chosen = rng.sample(seqs, batch)
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) * (1 - step / steps)
        loss = backward_batch(model, chosen, tok.pad_token_id)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss, 4))
        progress.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        progress.update(1)
        if step % 20 == 0 or step == steps - 1:
            logger.info("tiny verifier step %d/%d loss %.3f (%.0fs)", step + 1, steps, losses[-1], time.monotonic() - t0)
    progress.close()
    model.eval()
    model.to(getattr(torch, ARCHITECTURES[arch].dtype)).save_pretrained(str(dest))
    from ..common.atomic import write_json

    write_json(dest / TRAINING_FILE, {"arch": arch, "seed": seed, "steps": steps, "batch": batch, "lr": lr, "rows": rows,
                                      "sentences": list(SENTENCES), "micro_batches": MICRO_BATCHES,
                                      "losses": losses, "seconds": round(time.monotonic() - t0, 1)})
    return dest


def learnable_verifier(dest: Path, arch: str = "llama") -> bool:
    """:func:`build_learnable` with its defaults in ``dest``, through the per-machine cache
    (:mod:`.cache`: the recipe's defaults live in this file, whose source is part of the key).
    Returns whether it came from the cache."""
    from .cache import cached_build

    return cached_build(dest, {"arch": arch}, lambda folder: build_learnable(folder, arch),
                        lambda folder: is_built(folder, arch))


def is_built(dest: Path, arch: str = "llama") -> bool:
    try:
        record = json.loads((Path(dest) / TRAINING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if record.get("arch", "llama") != arch:
        return False
    return (Path(dest) / "model.safetensors").is_file()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle3_runner.tiny.verifier", description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--arch", default="llama", help="an architecture of eagle3_runner.tiny.arch")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(build_learnable(args.dest, args.arch, seed=args.seed, steps=args.steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
