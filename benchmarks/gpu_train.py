"""EAGLE-3 draft training speed on one GPU: speculators' stock Trainer loop against the runner's
fast loop (``eagle3 train --loop fast``), same data, settings and steps.

    python3 benchmarks/gpu_train.py --out $OUT [--steps 40] [--variants fast,stock-compiled,...]
    FC_DRY=1 python benchmarks/gpu_train.py --out /tmp/o      # CPU dry run, tiny shapes

Builds offline, in ``--work``: a verifier folder of Llama-3-8B width (config + random
``embed_tokens``/``lm_head``/``norm`` weights: all the draft reads of the verifier; training
imports nothing from vLLM), synthetic sample files in speculators' v1 format (4 layer ids, bf16,
``--sample-len`` tokens each; the last layer is a fixed linear mix of the three auxiliary ones,
so the loss has something to learn), and a 32,000-token draft vocabulary through
``eagle3_runner.vocab.build_vocab``. Each variant then runs ``eagle3_runner.train.train`` (what
``eagle3 train`` calls) in its own process, with instrumentation only: the per-step metrics
records (time stamps, losses), the packed batches' ``lengths`` (a forward pre-hook; for the FLOPs)
and, for a window of steps, the PyTorch profiler (device time by kind of kernel, host time of
the data loader and the optimizer). Steady-state numbers skip the first ``--warmup`` steps
(compilation) and the profiled ones. FLOPs: ``eagle3_runner/flops.py`` (formula there).

Variants: ``stock`` (speculators' loop, what ``eagle3 train`` ran before: torch.compile off),
``stock-compiled`` (speculators' loop with its ``@torch.compile`` forward on: speculators' own
default), ``fast`` (the runner's loop: bf16 autocast), ``fast-fp32`` (the runner's loop, float32),
and ``*-seed1`` (the same with seed 1: two seeds' gap is the noise band for the loss comparison).
Results (with each variant's profile tables and log tail): ``$OUT/train_results.json``, and a
table on stdout.
"""

from __future__ import annotations

import argparse
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
SHAPES = (dict(hidden=64, intermediate=160, heads=4, kv_heads=2, vocab=512, draft_vocab=256, layers=8)
          if DRY else
          dict(hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256, draft_vocab=32000, layers=32))
LAYER_IDS = [2, 16, 29, 32] if not DRY else [2, 4, 5, 8]
VARIANTS = {  # "site": "base" runs on --base-site (the catalog without this work's patches)
    "fast": {"loop": "fast"},
    "fast-fp32": {"loop": "fast", "precision": "fp32"},
    "fast-basesite": {"loop": "fast", "site": "base"},
    "stock": {"loop": "speculators", "site": "base"},
    "stock-compiled": {"loop": "speculators", "compile": True, "site": "base"},
    "stock-compiled-newsite": {"loop": "speculators", "compile": True},
}
for _name in list(VARIANTS):
    VARIANTS[_name + "-seed1"] = {**VARIANTS[_name], "seed": 1}
DEFAULT_VARIANTS = ("fast,stock,fast-seed1,fast-fp32,stock-seed1" if DRY
                    else "fast,stock-compiled,stock,stock-compiled-seed1,fast-basesite,fast-fp32,fast-seed1")


# --- data ---------------------------------------------------------------------------------------


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
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=dev)

    w = {"model.embed_tokens.weight": rand(s["vocab"], s["hidden"]) * 0.02,
         "lm_head.weight": rand(s["vocab"], s["hidden"]) * 0.02,
         "model.norm.weight": 1 + 0.1 * rand(s["hidden"])}
    save_file({k: v.to(torch.bfloat16).cpu().contiguous() for k, v in w.items()}, str(folder / "model.safetensors"))
    return folder


def build_samples(folder: Path, n_files: int, sample_len: int, seed: int = 0) -> Path:
    """``data_{i}.pt`` in speculators' v1 format, bf16 states; token ids skewed to low ids so
    that the draft vocabulary covers most of them."""
    import torch

    from eagle3_runner.formats import DATA_CONFIG, build_sample, sample_path, write_freq

    if (folder / DATA_CONFIG).is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(seed)
    h = SHAPES["hidden"]
    counts: dict[int, int] = {}
    for i in range(n_files):
        ids = (torch.rand(sample_len, generator=g, device=dev) ** 2 * SHAPES["draft_vocab"] * 1.2).long()
        aux = [torch.randn(sample_len, h, generator=g, device=dev) for _ in range(3)]
        last = (aux[0] + aux[1] - aux[2]) / 3 ** 0.5  # learnable from the auxiliary states
        states = [x.to(torch.bfloat16).cpu() for x in (*aux, last)]
        mask = torch.ones(sample_len, dtype=torch.long)
        mask[: sample_len // 8] = 0  # a "prompt" outside the loss
        for t in ids.tolist():
            counts[t] = counts.get(t, 0) + 1
        torch.save(build_sample(ids.tolist(), mask.tolist(), states), sample_path(folder, i))
    write_freq(folder.parent / "tokens.freq.json", counts, SHAPES["vocab"])
    (folder / DATA_CONFIG).write_text(json.dumps({"layer_ids": LAYER_IDS, "synthetic": True}))
    return folder


def build_all(work: Path, n_files: int, sample_len: int) -> dict[str, Path]:
    from eagle3_runner.vocab import build_vocab

    verifier = build_verifier(work / "verifier")
    data = build_samples(work / "samples", n_files, sample_len)
    vocab = work / "vocab"
    if not (vocab / "d2t.npy").is_file():
        build_vocab(work / "tokens.freq.json", SHAPES["vocab"], SHAPES["draft_vocab"], vocab)
    return {"verifier": verifier, "data": data, "vocab": vocab}


# --- one variant, in its own process --------------------------------------------------------------


def _instrument(profile_from: int, profile_steps: int, records: list, lengths: list) -> object:
    """Time stamps and losses of every metrics record; batch lengths from a forward pre-hook on
    the draft (set up when speculators' Trainer places the model); the profiler over a window."""
    import torch
    from speculators.train import trainer as trainer_mod

    from benchmarks.train_profile import make_profiler

    prof = make_profiler(profile_from, profile_steps, DEVICE)

    class Stamp(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.msg
            if isinstance(msg, dict) and "train" in msg:
                records.append({"t": time.perf_counter(), "step": getattr(record, "step", None),
                                "loss": msg["train"]["loss"]})
                if prof is not None:
                    prof.step()

    log = logging.getLogger("speculators.metrics")
    log.addHandler(Stamp())
    log.setLevel(logging.INFO)
    setup = trainer_mod.Trainer.setup_model

    def setup_model(self) -> None:  # noqa: ANN001
        setup(self)
        self.model.register_forward_pre_hook(
            lambda _m, _a, kw: lengths.append(kw["lengths"].detach().clone()), with_kwargs=True)

    trainer_mod.Trainer.setup_model = setup_model
    _ = torch
    return prof


def run_variant(name: str, paths: dict[str, Path], a: argparse.Namespace) -> dict:
    import torch

    from benchmarks.train_profile import summarize
    from eagle3_runner.train import TrainOptions, train

    spec = VARIANTS[name]
    records: list = []
    lengths: list = []
    compiled = spec["loop"] == "fast" or spec.get("compile") or DRY
    steps, warmup = (a.steps, a.warmup) if compiled else (a.stock_steps, 2)
    profile_from = max(warmup + 1, steps - a.profile_steps - 2)  # after the timed steps
    prof = _instrument(profile_from, a.profile_steps, records, lengths) if a.profile_steps else None
    opts = TrainOptions(data=paths["data"], vocab=paths["vocab"], verifier=paths["verifier"],
                        output=Path(a.work) / "ckpt" / name, steps=steps, device=DEVICE, seed=spec.get("seed", 0),
                        max_len=a.max_len, ttt_steps=3, compile=spec.get("compile", False), loop=spec["loop"],
                        precision=spec.get("precision", "auto"))
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    if prof is not None:
        with prof:
            result = train(opts)
    else:
        result = train(opts)
    wall = time.perf_counter() - t0
    out = {"variant": name, "options": {k: str(v) for k, v in vars(opts).items()}, "wall_s": wall, "warmup": warmup,
           "losses": result.losses, "records": records, "lengths": [x.tolist() for x in lengths],
           "profile_window": [profile_from, profile_from + a.profile_steps] if prof is not None else None}
    if DEVICE == "cuda":
        out["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    if prof is not None:
        out["profile"] = summarize(prof, DEVICE)
    from torch._dynamo.utils import counters

    out["dynamo"] = {"graph_breaks": sum(counters["graph_break"].values()),
                     "unique_graphs": counters["stats"].get("unique_graphs", 0),
                     "break_reasons": [k[:160] for k in counters["graph_break"]][:10]}
    return out


# --- steady state, FLOPs, comparison ---------------------------------------------------------------


def steady(res: dict) -> dict:
    from eagle3_runner.flops import H200_MEASURED_BF16, H200_PEAK_BF16, DraftShapes, mfu, step_flops

    s = SHAPES
    shapes = DraftShapes(hidden=s["hidden"], intermediate=s["intermediate"], heads=s["heads"], kv_heads=s["kv_heads"],
                         head_dim=s["hidden"] // s["heads"], draft_vocab=s["draft_vocab"], layers=1, ttt_steps=3)
    rec, lens = res["records"], res["lengths"]
    skip = set(range(*res["profile_window"])) if res.get("profile_window") else set()
    # step i's time: from record i-1 to record i; the fast loop logs one step late, so its last
    # record comes right after the one before: leave the last step out
    idx = [i for i in range(max(1, res["warmup"]), len(rec) - 1) if i not in skip and i - 1 not in skip]
    if not idx:
        return {}
    dts = [rec[i]["t"] - rec[i - 1]["t"] for i in idx]
    flops = [step_flops(shapes, lens[i])["total"] for i in idx]
    tokens = [sum(lens[i]) for i in idx]
    total = sum(dts)
    return {"steps_timed": len(idx), "step_ms_median": 1e3 * statistics.median(dts), "step_ms_mean": 1e3 * total / len(idx),
            "tokens_per_s": sum(tokens) / total, "tflops_per_s": sum(flops) / total / 1e12,
            "mfu_989": mfu(sum(flops), total, H200_PEAK_BF16), "mfu_790": mfu(sum(flops), total, H200_MEASURED_BF16),
            "tokens_per_step": statistics.mean(tokens), "flops_per_step": step_flops(shapes, lens[idx[0]])}


def loss_gap(a: list[float], b: list[float], start: int = 0) -> float | None:
    n = min(len(a), len(b))
    return statistics.mean(abs(x - y) for x, y in zip(a[start:n], b[start:n])) if n > start else None


def compare_losses(results: dict[str, dict]) -> dict:
    """Mean per-step |loss difference| of each run against ``stock-compiled`` (seed 0, else
    ``stock``); the noise band is the same number between two seeds of the reference loop."""
    ref = "stock-compiled" if "stock-compiled" in results else "stock"
    if ref not in results:
        return {}
    out = {"reference": ref}
    base = results[ref]["losses"]
    for name, r in results.items():
        if name != ref:
            out[name] = loss_gap(r["losses"], base)
    out["noise_band"] = out.get(ref + "-seed1")
    return out


def table(results: dict[str, dict], gaps: dict) -> str:
    ref = results.get("stock-compiled") or results.get("stock")
    ref_rate = (ref.get("steady") or {}).get("tokens_per_s") if ref else None
    lines = ["| variant | step ms (median) | tokens/s | vs stock-compiled | TFLOP/s | MFU of 989 | MFU of 790 | "
             "peak GiB | loss gap vs ref |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        st = r.get("steady") or {}
        if not st:
            lines.append(f"| {name} | failed or too few steps: {r.get('error', '')[:60]} |||||||")
            continue
        ratio = f"{st['tokens_per_s'] / ref_rate:.2f}x" if ref_rate else "-"
        gap = gaps.get(name)
        lines.append(f"| {name} | {st['step_ms_median']:.1f} | {st['tokens_per_s']:,.0f} | {ratio} | "
                     f"{st['tflops_per_s']:.1f} | {100 * st['mfu_989']:.1f}% | {100 * st['mfu_790']:.1f}% | "
                     f"{r.get('peak_allocated_gib', 0):.1f} | {'-' if gap is None else f'{gap:.4f}'} |")
    if gaps.get("noise_band") is not None:
        lines.append(f"noise band (|{gaps['reference']} seed 0 - seed 1| per step, mean): {gaps['noise_band']:.4f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/gpu_train_work" if not DRY else "/tmp/gpu_train_dry")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--steps", type=int, default=8 if DRY else 40)
    ap.add_argument("--stock-steps", type=int, default=8 if DRY else 14, help="steps of the uncompiled stock loop")
    ap.add_argument("--warmup", type=int, default=2 if DRY else 8)
    ap.add_argument("--profile-steps", type=int, default=2 if DRY else 4)
    ap.add_argument("--files", type=int, default=8 if DRY else 64)
    ap.add_argument("--sample-len", type=int, default=64 if DRY else 1024)
    ap.add_argument("--max-len", type=int, default=128 if DRY else 2048)
    ap.add_argument("--deadline", type=float, default=1e9,
                    help="seconds for the whole run: a variant is stopped at it, none starts within 30 s of it")
    ap.add_argument("--site", help="PYTHONPATH entry holding the patched speculators (default: as inherited)")
    ap.add_argument("--base-site", help="the same, patched without this work's patches (variants marked base)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    work = Path(a.work)
    if a.worker:
        paths = {k: work / v for k, v in (("verifier", "verifier"), ("data", "samples"), ("vocab", "vocab"))}
        res = run_variant(a.worker, paths, a)
        (work / f"variant_{a.worker}.json").write_text(json.dumps(res))
        return 0
    t0 = time.perf_counter()
    build_all(work, a.files, a.sample_len)
    print(f"data built in {time.perf_counter() - t0:.1f}s ({a.files} files x {a.sample_len} tokens)", flush=True)
    results: dict[str, dict] = {}
    for name in a.variants.split(","):
        left = a.deadline - (time.perf_counter() - t0)
        if left < 30:
            print(f"{name}: skipped (deadline)", flush=True)
            continue
        t1 = time.perf_counter()
        cmd = [sys.executable, __file__, "--worker", name, *sys.argv[1:]]
        site = a.base_site if VARIANTS[name].get("site") == "base" and a.base_site else a.site
        env = dict(os.environ)
        if site:
            env["PYTHONPATH"] = os.pathsep.join([site, str(REPO), env.get("PYTHONPATH", "")])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=left, env=env)
            rc, log = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, log = "timeout", str(exc.stdout or "") + str(exc.stderr or "")
        path = work / f"variant_{name}.json"
        if rc == 0 and path.is_file():
            r = json.loads(path.read_text())
            r["steady"] = steady(r)
        else:
            r = {"variant": name, "error": f"exit {rc}", "losses": []}
        r["log_tail"] = log[-8000:]
        results[name] = r
        print(f"{name}: {time.perf_counter() - t1:.0f}s, {json.dumps(r.get('steady', r.get('error')))[:300]}", flush=True)
        if r.get("profile"):
            prof_short = {k: v for k, v in r["profile"].items() if k != "table"}
            print(f"  profile (ms per step): {json.dumps(prof_short)}", flush=True)
        if r.get("dynamo"):
            print(f"  dynamo: {json.dumps(r['dynamo'])[:400]}", flush=True)
        gaps = compare_losses(results)
        slim = {k: {kk: vv for kk, vv in v.items() if kk != "records"} for k, v in results.items()}
        (out / "train_results.json").write_text(json.dumps(
            {"dry": DRY, "shapes": SHAPES, "args": vars(a), "gaps": gaps, "results": slim}, indent=1))
    print(table(results, compare_losses(results)))
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
