"""EAGLE-3 draft training speed on one GPU: speculators' stock Trainer loop against the runner's
fast loop (``eagle3 train --loop fast``), same data, settings and seed.

    bash benchmarks/gpu_train.sh                       # on the H200 (installs .whl, patches, runs this)
    FC_DRY=1 bash benchmarks/gpu_train.sh              # the same on the CPU, tiny shapes
    python3 benchmarks/gpu_train.py --out DIR [--variants fast,stock-compiled,stock] [--deadline S]

Builds, in ``--work``: a verifier folder of Llama-3-8B width (config + random ``embed_tokens`` /
``lm_head`` / ``norm``: all the draft reads of the verifier), synthetic samples in speculators'
v1 format (4 layer ids, bf16, ``--sample-len`` tokens; the last layer is a fixed mix of the
three auxiliary ones, so the loss has something to learn) and a 32,000-token draft vocabulary
(``eagle3_runner.train.vocab.build_vocab``).  Training imports nothing from vLLM.

Each variant runs ``eagle3_runner.train.train`` (what ``eagle3 train`` calls; ``--val-fraction
0``: the benchmark times training only) in its own process.  Up to ``--parallel`` variants run
at once so that their ``torch.compile`` work (CPU) overlaps, but their steps never share the
GPU: after its first step (compilation) a variant takes ``work/gpu.lock`` and keeps it until it
exits, so the timed and profiled steps of one variant run alone.  Each process appends every
metrics record (time stamp, loss, the batch's ``lengths``, peak memory) to
``work/records_<variant>.jsonl`` as it goes, so a variant stopped at ``--deadline`` still
counts.  Steady state: the steps after the lock and ``--warmup`` more, before the profiler's
window; FLOPs from ``eagle3_runner/train/flops.py``.

Variants: ``stock`` (speculators' loop, torch.compile off: what ``eagle3 train`` runs by
default), ``stock-compiled`` (speculators' loop with its ``@torch.compile`` forward on:
speculators' own default), ``fast`` (the runner's loop, bf16 autocast), ``fast-fp32``, and
``*-seed1`` (seed 1: two seeds' loss gap is the noise band).  All variants run on the same
catalog-patched speculators (the two graph-break patches included), so the ratio is the loop's.
Output: ``OUT/train_results.json`` (after every variant), ``OUT/train_table.md``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DRY = os.environ.get("FC_DRY") == "1"
DEVICE = "cpu" if DRY else "cuda"
# the verifier shapes the draft is built for (--shape): a Llama-3-8B width, and SmolLM2-135M (the
# real verifier of the draft pipeline, scripts/smollm2.py) with its measured draft vocabulary
SHAPE_SETS = {
    "llama8b": (dict(hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256, draft_vocab=32000,
                     layers=32), [2, 16, 29, 32]),
    "smollm2": (dict(hidden=576, intermediate=1536, heads=9, kv_heads=3, vocab=49152, draft_vocab=8192, layers=30),
                [2, 15, 27, 30]),
    "dry": (dict(hidden=64, intermediate=160, heads=4, kv_heads=2, vocab=512, draft_vocab=256, layers=8), [2, 4, 5, 8]),
}
_shape = os.environ.get("GPU_TRAIN_SHAPE", "dry" if DRY else "llama8b")
SHAPES, LAYER_IDS = SHAPE_SETS[_shape]
VARIANTS = {
    "fast": {"loop": "fast"},
    "fast-8k": {"loop": "fast", "max_len": 8192},  # tokens per step: the optimizer and fixed costs amortized
    "fast-fp32": {"loop": "fast", "precision": "fp32"},
    "stock": {"loop": "speculators"},
    "stock-compiled": {"loop": "speculators", "compile": True},
}
for _name in list(VARIANTS):
    VARIANTS[_name + "-seed1"] = {**VARIANTS[_name], "seed": 1}
LOCK = "gpu.lock"
# Imported by speculators' other modules but absent on the H200 (and not carried): a training
# run that imports one would fail there.  Checked in every variant (the dry run fails on it).
ABSENT_ON_H200 = ("vllm", "datasets", "deepspeed", "pydantic_settings", "wandb")


# --- data ---------------------------------------------------------------------------------------


def _generator(seed: int):  # noqa: ANN202
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.Generator(device=dev).manual_seed(seed), dev


def build_verifier(folder: Path, seed: int = 0) -> Path:
    """config.json + model.safetensors with the pieces the draft loads (embed, lm_head, norm)."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    s = SHAPES
    LlamaConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
                architectures=["LlamaForCausalLM"]).save_pretrained(folder)
    g, dev = _generator(seed)
    w = {"model.embed_tokens.weight": torch.randn(s["vocab"], s["hidden"], generator=g, device=dev) * 0.02,
         "lm_head.weight": torch.randn(s["vocab"], s["hidden"], generator=g, device=dev) * 0.02,
         "model.norm.weight": 1 + 0.1 * torch.randn(s["hidden"], generator=g, device=dev)}
    save_file({k: v.to(torch.bfloat16).cpu().contiguous() for k, v in w.items()}, str(folder / "model.safetensors"))
    return folder


def build_samples(folder: Path, n_files: int, sample_len: int, seed: int = 0) -> Path:
    """``data_{i}.pt`` in speculators' v1 format, bf16 states; token ids skewed to low ids so
    that the draft vocabulary covers most of them."""
    import torch

    from eagle3_runner.common.formats import DATA_CONFIG, build_sample, sample_path, write_freq

    if (folder / DATA_CONFIG).is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    g, dev = _generator(seed)
    counts: dict[int, int] = {}
    for i in range(n_files):
        ids = (torch.rand(sample_len, generator=g, device=dev) ** 2 * SHAPES["draft_vocab"] * 1.2).long()
        aux = [torch.randn(sample_len, SHAPES["hidden"], generator=g, device=dev) for _ in range(3)]
        last = (aux[0] + aux[1] - aux[2]) / 3 ** 0.5  # learnable from the auxiliary states
        mask = torch.ones(sample_len, dtype=torch.long)
        mask[: sample_len // 8] = 0  # a "prompt" outside the loss
        for t in ids.tolist():
            counts[t] = counts.get(t, 0) + 1
        states = [x.to(torch.bfloat16).cpu() for x in (*aux, last)]
        torch.save(build_sample(ids.tolist(), mask.tolist(), states), sample_path(folder, i))
    write_freq(folder.parent / "tokens.freq.json", counts, SHAPES["vocab"])
    (folder / DATA_CONFIG).write_text(json.dumps({"layer_ids": LAYER_IDS, "synthetic": True}))
    return folder


def build_all(work: Path, n_files: int, sample_len: int) -> dict[str, Path]:
    from eagle3_runner.train.vocab import build_vocab

    paths = {"verifier": build_verifier(work / "verifier"), "data": build_samples(work / "samples", n_files, sample_len),
             "vocab": work / "vocab"}
    if not (paths["vocab"] / "d2t.npy").is_file():
        build_vocab(work / "tokens.freq.json", SHAPES["vocab"], SHAPES["draft_vocab"], paths["vocab"])
    return paths


# --- one variant, in its own process --------------------------------------------------------------


def _plan(name: str, a: argparse.Namespace) -> dict[str, int]:
    """Steps of a variant: 1 (compilation) + warmup + timed + profiled + 1 (the fast loop logs a
    step late, so its last record comes right after the one before)."""
    timed = a.stock_steps if name.startswith("stock") and not VARIANTS[name].get("compile") else a.steps
    profile_from = 1 + a.warmup + timed
    return {"timed": timed, "profile_from": profile_from, "steps": profile_from + a.profile_steps + 1}


def packed_lengths(samples: int, tokens: int, max_len: int) -> list[int]:
    """A packed batch's ``lengths`` for ``samples`` samples of ``tokens`` (shifted) tokens each,
    cut at ``max_len`` as speculators' collate (and ``train_data.PackCollate``) cuts them."""
    out, pos = [], 0
    for _ in range(samples):
        if pos >= max_len:
            break
        out.append(min(tokens, max_len - pos))
        pos += out[-1]
    return out


def run_variant(name: str, work: Path, a: argparse.Namespace) -> dict:
    import torch

    from benchmarks.train_profile import make_profiler, summarize
    from eagle3_runner import train as train_mod
    from eagle3_runner.train import TrainOptions, train

    spec, plan = VARIANTS[name], _plan(name, a)
    records = (work / f"records_{name}.jsonl").open("w")
    lengths: list = []
    lock = (work / LOCK).open("w")

    def write(obj: dict) -> None:
        records.write(json.dumps(obj) + "\n")
        records.flush()

    def on_profile(p) -> None:  # noqa: ANN001 - the window ended: summarize it now (the run may be stopped later)
        (work / f"profile_{name}.json").write_text(json.dumps(summarize(p, DEVICE)))

    prof = make_profiler(plan["profile_from"], a.profile_steps, DEVICE, on_profile)

    class Stamp(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.msg
            if not (isinstance(msg, dict) and "train" in msg):
                return
            step = getattr(record, "step", None)
            row = {"t": time.perf_counter(), "step": step, "loss": msg["train"]["loss"],
                   "lengths": lengths[step] if step is not None and step < len(lengths) else None}
            if DEVICE == "cuda":
                row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            write(row)
            if step == 0:  # compiled: from now on this variant has the GPU to itself
                fcntl.flock(lock, fcntl.LOCK_EX)
                write({"lock": time.perf_counter()})
            if prof is not None:
                prof.step()

    log = logging.getLogger("speculators.metrics")
    log.addHandler(Stamp())
    log.setLevel(logging.INFO)
    # the batches' lengths, for the FLOPs, from the batch sampler's index lists on the host (every
    # sample has --sample-len tokens): reading them off the device would sync it every step
    inner_iter = train_mod._StepsSampler.__iter__

    def sampler_iter(self):  # noqa: ANN001, ANN202
        for indices in inner_iter(self):
            lengths.append(packed_lengths(len(indices), a.sample_len - 1, spec.get("max_len", a.max_len)))
            yield indices

    train_mod._StepsSampler.__iter__ = sampler_iter
    opts = TrainOptions(data=work / "samples", vocab=work / "vocab", verifier=work / "verifier",
                        output=work / "ckpt" / name, steps=plan["steps"], device=DEVICE, seed=spec.get("seed", 0),
                        max_len=spec.get("max_len", a.max_len), ttt_steps=3, compile=spec.get("compile", False),
                        loop=spec["loop"],
                        precision=spec.get("precision", "auto"), val_fraction=0.0)
    t0 = time.perf_counter()
    write({"start": t0})
    if prof is not None:
        with prof:
            train(opts)
    else:
        train(opts)
    from torch._dynamo.utils import counters

    return {"wall_s": time.perf_counter() - t0, "plan": plan,
            "absent_on_h200_imported": sorted(m for m in ABSENT_ON_H200 if m in sys.modules), "options": {k: str(v) for k, v in vars(opts).items()},
            "dynamo": {"graph_breaks": sum(counters["graph_break"].values()),
                       "unique_graphs": counters["stats"].get("unique_graphs", 0),
                       "break_reasons": [k[:160] for k in counters["graph_break"]][:10]}}


# --- steady state, FLOPs, comparison ---------------------------------------------------------------


def steady(rows: list[dict], warmup: int, profile_from: int) -> dict:
    """Step times between consecutive records after the lock and ``warmup`` more, before the
    profiled steps; tokens and FLOPs of those steps' batches."""
    from eagle3_runner.train.flops import H200_MEASURED_BF16, H200_PEAK_BF16, DraftShapes, mfu, step_flops

    s = SHAPES
    shapes = DraftShapes(hidden=s["hidden"], intermediate=s["intermediate"], heads=s["heads"], kv_heads=s["kv_heads"],
                         head_dim=s["hidden"] // s["heads"], draft_vocab=s["draft_vocab"], layers=1, ttt_steps=3)
    locked = next((i for i, r in enumerate(rows) if "lock" in r), None)
    if locked is None:
        return {}
    recs = [r for r in rows[locked + 1:] if "t" in r and r["step"] < profile_from]
    pairs = [(recs[i - 1], recs[i]) for i in range(warmup + 1, len(recs)) if recs[i]["lengths"]]
    if not pairs:
        return {}
    dts = [b["t"] - a["t"] for a, b in pairs]
    flops = [step_flops(shapes, b["lengths"])["total"] for _, b in pairs]
    total = sum(dts)
    return {"steps_timed": len(dts), "step_ms_median": 1e3 * statistics.median(dts), "step_ms_mean": 1e3 * total / len(dts),
            "tokens_per_s": sum(sum(b["lengths"]) for _, b in pairs) / total, "tflops_per_s": sum(flops) / total / 1e12,
            "mfu_989": mfu(sum(flops), total, H200_PEAK_BF16), "mfu_790": mfu(sum(flops), total, H200_MEASURED_BF16),
            "flops_per_step": step_flops(shapes, pairs[0][1]["lengths"])}


def collect(name: str, work: Path, a: argparse.Namespace, rc: object, log: str) -> dict:
    path = work / f"records_{name}.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    plan = _plan(name, a)
    out: dict = {"variant": name, "rc": rc, "losses": [r["loss"] for r in rows if "loss" in r],
                 "peak_allocated_gib": max((r.get("peak_gib", 0) for r in rows), default=0),
                 "steady": steady(rows, a.warmup, plan["profile_from"]), "log_tail": log[-3000:]}
    for key, file in (("final", f"variant_{name}.json"), ("profile", f"profile_{name}.json")):
        if (work / file).is_file():
            out[key] = json.loads((work / file).read_text())
    start = next((r["start"] for r in rows if "start" in r), None)
    first = next((r["t"] for r in rows if "t" in r), None)
    if start is not None and first is not None:
        out["first_step_s"] = first - start  # model set-up, compilation and the first step
    return out


def loss_gaps(results: dict[str, dict]) -> dict:
    """Mean per-step |loss difference| against ``stock-compiled`` (else ``stock``), over the
    steps both ran; the noise band is the same between two seeds of one loop."""
    ref = next((r for r in ("stock-compiled", "stock") if results.get(r, {}).get("losses")), None)
    if ref is None:
        return {}

    def gap(x: list[float], y: list[float]) -> float | None:
        n = min(len(x), len(y))
        return statistics.mean(abs(p - q) for p, q in zip(x[:n], y[:n])) if n else None

    out: dict = {"reference": ref}
    for name, r in results.items():
        if name != ref:
            out[name] = gap(r["losses"], results[ref]["losses"])
    for loop in ("fast", ref):
        if loop in results and loop + "-seed1" in results:
            out[f"noise_band_{loop}"] = gap(results[loop]["losses"], results[loop + "-seed1"]["losses"])
    return out


def table(results: dict[str, dict], gaps: dict) -> str:
    ref = (results.get(gaps.get("reference", "")) or {}).get("steady", {}).get("tokens_per_s")
    lines = [f"| variant | step ms (median) | tokens/s | vs {gaps.get('reference', 'ref')} | TFLOP/s | MFU of 989 | "
             "MFU of 790 | peak GiB | mean loss gap vs ref |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        st = r.get("steady") or {}
        if not st:
            lines.append(f"| {name} | no steady steps (rc {r['rc']}, {len(r['losses'])} steps logged) |||||||")
            continue
        ratio = f"{st['tokens_per_s'] / ref:.2f}x" if ref else "-"
        gap = gaps.get(name)
        lines.append(f"| {name} | {st['step_ms_median']:.1f} | {st['tokens_per_s']:,.0f} | {ratio} | "
                     f"{st['tflops_per_s']:.1f} | {100 * st['mfu_989']:.1f}% | {100 * st['mfu_790']:.1f}% | "
                     f"{r['peak_allocated_gib']:.1f} | {'-' if gap is None else f'{gap:.4f}'} |")
    lines += [f"{k}: {v:.4f}" for k, v in gaps.items() if k.startswith("noise_band") and v is not None]
    return "\n".join(lines)


# --- the schedule -----------------------------------------------------------------------------------


def run_all(a: argparse.Namespace, out: Path, work: Path, t0: float) -> dict[str, dict]:
    """Up to ``--parallel`` variant processes at a time, in order; each is stopped at the deadline."""
    queue, running, results = [v for v in a.variants.split(",") if v], {}, {}
    (work / LOCK).touch()

    def finish(name: str, p: subprocess.Popen, log_path: Path) -> None:
        rc = p.poll()
        if rc is None:
            p.kill()
            rc = "stopped at the deadline"
        p.wait()
        res = collect(name, work, a, rc, log_path.read_text(errors="replace"))
        results[name] = res
        st = res.get("steady") or {}
        print(f"{name}: rc {rc}, {len(res['losses'])} steps, {json.dumps(st)[:300]}", flush=True)
        if res.get("profile"):
            print(f"  profile (ms per step): {json.dumps({k: v for k, v in res['profile'].items() if k != 'table'})}")
        if res.get("final"):
            print(f"  dynamo: {json.dumps(res['final']['dynamo'])[:300]}", flush=True)
        (out / "train_results.json").write_text(json.dumps(
            {"dry": DRY, "shapes": SHAPES, "args": vars(a), "gaps": loss_gaps(results), "results": results}, indent=1))

    while queue or running:
        left = a.deadline - (time.perf_counter() - t0)
        while queue and len(running) < a.parallel and left > a.min_left:
            name = queue.pop(0)
            for stale in (f"records_{name}.jsonl", f"variant_{name}.json", f"profile_{name}.json"):
                (work / stale).unlink(missing_ok=True)  # a warm machine's earlier run
            log_path = work / f"log_{name}.txt"
            cmd = [sys.executable, __file__, "--worker", name, *sys.argv[1:]]
            with log_path.open("w") as fh:
                running[name] = (subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT), log_path)
            print(f"{name}: started at {time.perf_counter() - t0:.0f}s", flush=True)
        if not running:
            print(f"not started (deadline): {','.join(queue)}", flush=True)
            break
        for name, (p, log_path) in list(running.items()):
            if p.poll() is not None or left <= 0:
                finish(name, p, log_path)
                del running[name]
        time.sleep(0.2)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/gpu_train_dry" if DRY else "/tmp/gpu_train_work")
    ap.add_argument("--variants", default="fast,stock-compiled,stock,fast-seed1,fast-fp32")
    ap.add_argument("--parallel", type=int, default=3, help="variant processes at once (compilation overlaps)")
    ap.add_argument("--steps", type=int, default=6 if DRY else 30, help="timed steps of the compiled variants")
    ap.add_argument("--stock-steps", type=int, default=4 if DRY else 8, help="timed steps of the uncompiled loop")
    ap.add_argument("--warmup", type=int, default=2 if DRY else 4, help="steps after the first, untimed")
    ap.add_argument("--profile-steps", type=int, default=2 if DRY else 3)
    ap.add_argument("--files", type=int, default=16 if DRY else 32)
    ap.add_argument("--sample-len", type=int, default=64 if DRY else 1024)
    ap.add_argument("--max-len", type=int, default=128 if DRY else 2048)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds for the whole run; running variants "
                    "are stopped at it (their logged steps still count)")
    ap.add_argument("--min-left", type=float, default=25.0, help="start no variant with fewer seconds left")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if a.worker:
        res = run_variant(a.worker, work, a)
        (work / f"variant_{a.worker}.json").write_text(json.dumps(res))
        return 0
    t0 = time.perf_counter()
    for name in a.variants.split(","):
        if name not in VARIANTS:
            ap.error(f"unknown variant {name!r}: {', '.join(VARIANTS)}")
    build_all(work, a.files, a.sample_len)
    print(f"data built in {time.perf_counter() - t0:.1f}s ({a.files} files x {a.sample_len} tokens)", flush=True)
    results = run_all(a, out, work, t0)
    text = table(results, loss_gaps(results))
    (out / "train_table.md").write_text(text + "\n")
    print(text)
    absent = sorted({m for r in results.values() for m in r.get("final", {}).get("absent_on_h200_imported", [])})
    if absent:
        print(f"training imported packages the H200 does not have: {absent}")
    return 0 if results and not absent and all(r["rc"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
