"""Run by tests/runner/test_train_fast.py in a subprocess whose PYTHONPATH is the patched
speculators site: compares the fast path's pieces with speculators' own and prints JSON.

    python _train_probe.py batches SAMPLES MAX_LEN       # fast loader vs speculators' collate
    python _train_probe.py flops SAMPLES VOCAB VERIFIER  # counted FLOPs vs the formula
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from eagle3_runner.common.formats import iter_sample_files


def batches(samples: Path, max_len: int) -> dict:
    from speculators.train.data import Eagle3SampleFileDataset, create_collate_fn

    from eagle3_runner.train.data import ERROR, DevicePrefetcher, fast_loader

    files = [str(p) for _, p in iter_sample_files(samples)]
    n = len(files)
    # one sample; two; enough to overflow max_len (the last length cut); repeated indices
    index_lists = [[0], [1, 2], list(range(min(n, 12))), [3, 3, 5], [n - 1, 0, 4, 2, 7, 6]]
    ref_ds = Eagle3SampleFileDataset(max_len=max_len, file_list=files)
    collate = create_collate_fn(max_len)
    fast = DevicePrefetcher(fast_loader(files, index_lists, max_len=max_len, num_layers=4,
                                        hidden_size=ref_ds[0]["verifier_last_hidden_states"].shape[-1],
                                        workers=1, pin_memory=False), "cpu", torch.float32)
    report = []
    for idx, got in zip(index_lists, fast, strict=True):
        want = collate([ref_ds[i] for i in idx])
        assert ERROR not in got
        assert set(got) == set(want), (sorted(got), sorted(want))
        report.append({
            "indices": idx, "lengths": want["lengths"].tolist(),
            "equal": {k: bool(got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
                              and torch.equal(got[k], want[k])) for k in want},
        })
    return {"batches": report}


def flops(samples: Path, vocab: Path, verifier: Path) -> dict:
    """One forward + backward of speculators' draft on one packed batch under FlopCounterMode,
    and the mask's real (query, key) pairs, against eagle3_runner.train.flops."""
    from speculators.models.eagle3.attention import create_combined_mask_mod
    from speculators.train import trainer as trainer_mod
    from torch.nn.attention.flex_attention import create_mask
    from torch.utils.flop_counter import FlopCounterMode

    from eagle3_runner.train import flops as fl
    from eagle3_runner.train import TrainOptions, draft_layer_config, train
    from eagle3_runner.train.data import DevicePrefetcher

    out: dict = {}

    def run_training(self) -> None:  # noqa: ANN001 - replaces the Trainer's, once
        batch = next(iter(DevicePrefetcher(self.train_loader, "cpu", torch.float32)))
        counter = FlopCounterMode(display=False)
        with counter:
            _, loss, _ = self.model(**batch, ttt_steps=3)
            loss.backward()
        by_op = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
        rows = batch["input_ids"].shape[1]
        lengths = batch["lengths"].tolist()
        mask_mod = create_combined_mask_mod(batch["lengths"], rows)
        real = sum(lengths)
        pairs = 0
        for k in range(3):
            m = create_mask(mask_mod, None, None, rows, (k + 1) * rows, device="cpu")[0, 0]
            pairs += int(m[:real].sum())
        cfg = draft_layer_config(verifier, 1, "sdpa")
        shapes = fl.DraftShapes.from_layer_config(cfg, self.model.draft_vocab_size, 3)
        out.update(rows=rows, lengths=lengths, by_op=by_op, mask_pairs=pairs,
                   formula_linear=sum(fl.per_token_flops(shapes).values()) * rows,
                   formula_attention=fl.attention_flops(shapes, lengths),
                   attention_per_pair=3 * 4 * shapes.heads * shapes.head_dim)
        raise SystemExit(0)

    trainer_mod.Trainer.run_training = run_training
    try:
        train(TrainOptions(data=samples, vocab=vocab, verifier=verifier, output=samples.parent / "flops-ckpt",
                           steps=1, device="cpu", max_len=256, loop="fast"))
    except SystemExit:
        pass
    return out


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "batches":
        result = batches(Path(args[0]), int(args[1]))
    else:
        result = flops(Path(args[0]), Path(args[1]), Path(args[2]))
    print(json.dumps(result))
