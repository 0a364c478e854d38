"""What the GPU benchmarks check in the files ``eagle3 extract`` writes: every file loaded and
checked against its token row, and states compared across paths."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from benchmarks.gpu_models import rel
from eagle3_runner.common.formats import read_token_rows, sample_path


def write_rows(path: Path, samples) -> Path:
    with open(path, "w") as fh:
        for _, ids, mask in samples:
            fh.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
    return path


def validate(out: Path, rows: Path, n_layers: int, hidden: int, limit: int | None = None) -> dict:
    """Load every file the CLI wrote and check it against its token row (not just existence)."""
    t = time.perf_counter()
    bad, nbytes, dtypes = [], 0, set()
    rs = read_token_rows(rows)[:limit]
    for r in rs:
        path = sample_path(out, r.index)
        try:
            d = torch.load(str(path), weights_only=True, mmap=True)
            hs = d["hidden_states"]
            ok = (d["input_ids"].tolist() == r.input_ids and d["loss_mask"].tolist() == r.loss_mask
                  and len(hs) == n_layers and all(h.shape == (len(r.input_ids), hidden) for h in hs)
                  and all(bool(torch.isfinite(h).all()) for h in hs))
            dtypes |= {str(h.dtype) for h in hs}
            nbytes += path.stat().st_size
            if not ok:
                bad.append(f"{path.name}: ids, mask, shapes or values wrong")
        except Exception as e:  # noqa: BLE001
            bad.append(f"{path.name}: {type(e).__name__}: {e}")
    return {"files_checked": len(rs), "bad": bad[:20], "n_bad": len(bad), "bytes": nbytes,
            "dtypes": sorted(dtypes), "seconds": time.perf_counter() - t}


def states_of(folder: Path, index: int) -> list[torch.Tensor]:
    return torch.load(str(sample_path(folder, index)), weights_only=True)["hidden_states"]


def compare(got: dict[int, list], want: dict[int, list], layer_ids) -> dict:
    """Max relative error per layer id of ``got`` against ``want`` (same prompts)."""
    worst = {lid: 0.0 for lid in layer_ids}
    for index, states in got.items():
        for lid, g, w in zip(layer_ids, states, want[index]):
            worst[lid] = max(worst[lid], rel(g.float(), w.float()))
    return worst
