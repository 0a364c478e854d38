"""CPU training attention: cut per document vs one call over the whole mask, same inputs, one run.

    .venv/bin/python benchmarks/cpu_attention.py [--lengths 400,300,250,330,200,270,180] [--repeats 5]

The three draft steps of one training step (forward and backward) at SmolLM2-135M's draft shape
(9 heads, 3 KV heads, head size 64, 2,048-token packed batch), on speculators' own mask
(``create_combined_mask_mod`` and ``extend_mask_for_draft_tokens``, from a patched speculators
0.3.0 site built as ``benchmarks/cpu_extract.py`` builds it): :func:`dense_mask_sdpa_forward`
(``eagle3_runner/common/cpu_attention.py``) against ``scaled_dot_product_attention`` over the
whole dense mask (what it did before), medians of ``--repeats`` runs, with the largest
difference of outputs and gradients.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, statistics, sys, time
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, create_mask
from speculators.models.eagle3.attention import create_combined_mask_mod, extend_mask_for_draft_tokens
from eagle3_runner.common.cpu_attention import dense_mask_sdpa_forward

lengths, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
T, H, KV, D = 2048, 9, 3, 64
torch.manual_seed(0)
masks, block = [], create_block_mask(create_combined_mask_mod(torch.tensor(lengths), T), B=None, H=None,
                                     Q_LEN=T, KV_LEN=T, device="cpu")
for step in range(3):
    masks.append(block)
    block = extend_mask_for_draft_tokens(block)
inputs = [[torch.randn(1, h, T * (s + 1) if i else T, D, requires_grad=True) for i, h in enumerate((H, KV, KV))]
          for s in range(3)]
grads = [torch.randn(1, T, H, D) for _ in range(3)]

def grouped(s, q, k, v):
    return dense_mask_sdpa_forward(None, q, k, v, masks[s], scaling=D ** -0.5)[0]

def whole(s, q, k, v):
    dense = create_mask(masks[s].mask_mod, None, None, T, T * (s + 1), device="cpu")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=dense, scale=D ** -0.5, enable_gqa=True).transpose(1, 2)

def run(fn):
    t0, outs = time.perf_counter(), []
    for s, (q, k, v) in enumerate(inputs):
        out = fn(s, q, k, v)
        outs.append((out.detach(), torch.autograd.grad((out * grads[s]).sum(), (q, k, v))))
    return time.perf_counter() - t0, outs

times = {"grouped": [], "whole": []}
for _ in range(repeats):
    for name, fn in (("whole", whole), ("grouped", grouped)):
        seconds, outs = run(fn)
        times[name].append(seconds)
        if name == "whole":
            ref = outs
worst = max(float((a - b).abs().max()) for (o, g), (ro, rg) in zip(outs, ref) for a, b in zip((o, *g), (ro, *rg)))
med = {k: statistics.median(v) for k, v in times.items()}
print("RESULT " + json.dumps({"lengths": lengths, "repeats": repeats, "seconds_grouped": round(med["grouped"], 3),
      "seconds_whole_mask": round(med["whole"], 3), "ratio": round(med["grouped"] / med["whole"], 3),
      "max_abs_difference": worst}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="400,300,250,330,200,270,180",
                   help="document lengths packed into the 2,048-token batch (the rest is padding)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "eagle3-bench-site")
    p.add_argument("--json", type=Path, help="write the result here too")
    args = p.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    if sum(lengths) > 2048 or min(lengths) < 1:
        p.error("--lengths must be positive and sum to at most 2048")
    from benchmarks.cpu_extract import patched_site

    site = patched_site(args.site)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(lengths), str(args.repeats)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    result = json.loads(lines[-1][len("RESULT "):])
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
