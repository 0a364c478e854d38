"""The fast path's speed and correctness on a GPU, in process (vLLM 0.20 on one H200).

    python3 benchmarks/gpu_extract.py --out $OUT            # everything (each part in a subprocess)
    python3 benchmarks/gpu_extract.py --part check|perf --layers 8 ...
    FC_DRY=1 .venv/bin/python benchmarks/gpu_extract.py --out /tmp/o --layer-set 8 --skip-env  # CPU dry run

Parts:
* ``check``: a small bf16 Llama built on the GPU; the fast path's files (ragged batch of 14
  prompts, one chunked over several steps) against HF transformers on the same GPU (rel <= 2e-2),
  and resume (one deleted file redone).
* ``perf --layers L``: a random-weight Llama of Llama-3-8B width with L layers; in ONE engine:
  plain prefill (max_tokens=1), then ``run_fast`` end to end (files written and validated) in
  each writer setting of ``--variants`` (``raw:8:nofsync``, ``torch:4:fsync``, ``raw:4:fsync:shm``...).
* ``env``: the pinned device-to-host copy and disk-write ceilings.
Results: ``$OUT/results.json`` and ``$OUT/results.md``.  The CLI process, the patched
speculators generator and the 32-layer model are ``benchmarks/gpu_cli.py``; the numbers of
both are in the README's Performance section.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.gpu_models import DEVICE, DRY, build_llama, hf_states, param_counts, ragged_samples, random_samples, rel, sync  # noqa: E402
from eagle3_runner.extract.backends import vllm_fast as fc  # noqa: E402
from patches.shims.host_memory import pwrite_all  # noqa: E402

PEAK_DENSE_BF16 = 989e12
MEASURED_MATMUL = 790e12


# ----------------------------------------------------------------------------------------------
# ceilings
# ----------------------------------------------------------------------------------------------
def d2h_bandwidth(nbytes=1 << 30):
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return 5 * nbytes / (time.perf_counter() - t0)


def disk_bandwidth(dirpath: Path, total=4 << 30, chunk=32 << 20, threads=4, fsync=True):
    dirpath.mkdir(parents=True, exist_ok=True)
    buf = memoryview(torch.randint(0, 255, (chunk,), dtype=torch.uint8).numpy()).cast("B")
    n_files = total // chunk
    lock = threading.Lock()
    todo = list(range(n_files))

    def work():
        while True:
            with lock:
                if not todo:
                    return
                k = todo.pop()
            fd = os.open(dirpath / f"f{k}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            pwrite_all(fd, buf, 0)
            if fsync:
                os.fsync(fd)
            os.close(fd)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work) for _ in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    bw = total / (time.perf_counter() - t0)
    shutil.rmtree(dirpath, ignore_errors=True)
    return bw


# ----------------------------------------------------------------------------------------------
# parts
# ----------------------------------------------------------------------------------------------
def part_check(work: Path) -> dict:
    """Fast path vs HF transformers on the same GPU (bf16), ragged batch + chunked prefill."""
    from transformers import AutoModelForCausalLM

    mdir = build_llama(work / "small", layers=4, hidden=1024, inter=2816, heads=8, kv=4, vocab=4096, seed=1)
    layer_ids = [0, 1, 3, 6] if DRY else [0, 1, 3, 4]
    samples = ragged_samples(500 if DRY else 4096, dup_index=99)
    llm = fc.make_llm(mdir, max_model_len=1024, dtype="float32" if DRY else "bfloat16", gpu_memory_utilization=0.3,
                      max_num_batched_tokens=256, max_num_seqs=16)
    out = work / "check_out"
    shutil.rmtree(out, ignore_errors=True)
    s1 = fc.run_fast(llm, samples, out, layer_ids, batch_size=16, max_model_len=1024)
    (out / "data_1.pt").unlink()
    s2 = fc.run_fast(llm, samples, out, layer_ids, batch_size=16, max_model_len=1024)
    del llm
    hf = AutoModelForCausalLM.from_pretrained(str(mdir), dtype=torch.float32 if DRY else torch.bfloat16)
    hf = hf.to(DEVICE).eval()
    worst = {lid: 0.0 for lid in layer_ids}
    mism = []
    for index, ids, lm in samples:
        d = torch.load(str(out / f"data_{index}.pt"), weights_only=True)
        if d["input_ids"].tolist() != ids or d["loss_mask"].tolist() != lm:
            mism.append(index)
        with torch.no_grad():
            ref = hf_states(hf, ids, layer_ids)
        for lid, got, want in zip(layer_ids, d["hidden_states"], ref):
            worst[lid] = max(worst[lid], rel(got.float(), want.float().cpu()))
    res = {"first_run": s1, "resume_run": {k: s2[k] for k in ("submitted", "skipped_existing", "written", "bad")},
           "rel_err_max_per_layer": worst, "ids_or_mask_mismatch": mism,
           "pass": max(worst.values()) <= 2e-2 and not mism and not s1["bad"] and s1["written"] == len(samples)
           and s2["skipped_existing"] == len(samples) - 1 and s2["written"] == 1,
           "samples": len(samples), "lengths": [len(s[1]) for s in samples], "max_num_batched_tokens": 256}
    return res


def part_perf(work: Path, layers: int, n_prompts: int, length: int, mnbt: int, variants: list[str],
              local: Path) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    mdir = build_llama(work / ("tiny" if DRY else f"llama{layers}"), layers=layers)
    layers = 6 if DRY else layers
    N = layers
    layer_ids = [2, N // 2, N - 3, N]
    vocab = 512 if DRY else 128256
    t0 = time.perf_counter()
    llm = fc.make_llm(mdir, max_model_len=length + 64, dtype="float32" if DRY else "bfloat16",
                      gpu_memory_utilization=0.3 if DRY else 0.85,
                      max_num_batched_tokens=mnbt, max_num_seqs=256)
    res = {"layers": layers, "layer_ids": layer_ids, "prompts": n_prompts, "prompt_len": length,
           "max_num_batched_tokens": mnbt, "engine_start_s": time.perf_counter() - t0,
           "params": param_counts(layers)}
    seed = [100]

    def fresh(n):
        seed[0] += 1
        return random_samples(n, length, vocab, seed[0], start=seed[0] * 100000)

    def plain(samples):
        ps = [TokensPrompt(prompt_token_ids=ids) for _, ids, _ in samples]
        sync()
        t = time.perf_counter()
        llm.generate(ps, SamplingParams(max_tokens=1, detokenize=False), use_tqdm=False)
        return sum(len(s[1]) for s in samples) / (time.perf_counter() - t)

    plain(fresh(64))  # warm-up
    res["plain_tokens_per_s"] = [plain(fresh(n_prompts)) for _ in range(2)]
    best_plain = max(res["plain_tokens_per_s"])
    tokens = n_prompts * length
    t_plain = tokens / best_plain
    nonemb = res["params"]["non_embedding"]
    attn = 2 * 2 * layers * 4096 * (length * (length + 1) / 2) * n_prompts  # QK^T and PV, causal
    res["mfu"] = {
        "flops_2PT": 2 * nonemb * tokens,
        "flops_attention": attn,
        "vs_989_dense_2PT": 2 * nonemb * tokens / t_plain / PEAK_DENSE_BF16,
        "vs_790_measured_2PT": 2 * nonemb * tokens / t_plain / MEASURED_MATMUL,
        "vs_989_dense_with_attn": (2 * nonemb * tokens + attn) / t_plain / PEAK_DENSE_BF16,
        "vs_790_measured_with_attn": (2 * nonemb * tokens + attn) / t_plain / MEASURED_MATMUL,
    }
    bytes_per_token = len(layer_ids) * (256 * 4 if DRY else 4096 * 2)
    res["variants"] = {}
    for v in variants:
        # "raw:4:fsync" / "torch:4:fsync" / "raw:8:nofsync" / "raw:4:fsync:shm"
        mode, threads, fsync_opt, *where = v.split(":")
        dest_root = Path("/dev/shm/fc") if where and where[0] == "shm" else local / "fc"
        shutil.rmtree(dest_root, ignore_errors=True)
        try:
            fc.run_fast(llm, fresh(32), dest_root / "warm", layer_ids, batch_size=n_prompts,
                        writer_threads=int(threads), write_mode=mode, fsync=fsync_opt == "fsync")
            samples = fresh(n_prompts)
            s = fc.run_fast(llm, samples, dest_root / "run", layer_ids, batch_size=n_prompts,
                            writer_threads=int(threads), write_mode=mode, fsync=fsync_opt == "fsync")
            # every file valid (cheap: mmap load + shapes + ids)
            t = time.perf_counter()
            nvalid = sum(fc.valid_sample_file(fc.sample_path(dest_root / "run", i), ids, len(layer_ids),
                                              256 if DRY else 4096)
                         for i, ids, _ in samples)
            s["validate_after_s"] = time.perf_counter() - t
            s["files_valid"] = nvalid
            s["ratio_vs_plain"] = s["tokens_per_s"] / best_plain
            s["host_copy_GBps"] = s["tokens_captured"] * bytes_per_token / s["wall_s"] / 1e9
            s["disk_write_GBps"] = s["bytes_written"] / s["wall_s"] / 1e9
            s["write_GBps_per_thread_busy"] = s["bytes_written"] / max(s["t_write_s"], 1e-9) / 1e9
            s.pop("bad", None) if not s.get("bad") else None
            res["variants"][v] = s
            print(f"[{layers}L] {v}: {s['tokens_per_s']:.0f} tok/s ({s['ratio_vs_plain']:.0%}) "
                  f"valid {nvalid}/{len(samples)}", flush=True)
        except Exception as e:  # noqa: BLE001
            res["variants"][v] = {"error": f"{type(e).__name__}: {e}"}
            print(f"[{layers}L] {v}: ERROR {e}", flush=True)
        shutil.rmtree(dest_root, ignore_errors=True)
    return res


# ----------------------------------------------------------------------------------------------
def markdown(results: dict) -> str:
    lines = ["# Hidden-state extraction on the GPU", ""]
    env = results.get("env", {})
    lines.append(f"- GPU: {env.get('gpu')}, vLLM {env.get('vllm')}, torch {env.get('torch')}")
    lines.append(f"- pinned D2H copy ceiling: {env.get('d2h_GBps', 0):.1f} GB/s; disk write ceiling "
                 f"(4 threads, 32 MiB files, fsync): {env.get('disk_GBps', 0):.2f} GB/s; "
                 f"/dev/shm: {env.get('shm_GBps', 0):.2f} GB/s")
    c = results.get("check")
    if c:
        lines.append(f"- GPU correctness (bf16, vs HF on the same GPU): pass={c.get('pass')}, "
                     f"max rel err per layer {c.get('rel_err_max_per_layer')}, error={c.get('error')}")
    lines += ["", "| model | path | tokens/s | vs plain | host copy GB/s | disk GB/s | notes |",
              "|---|---|---|---|---|---|---|"]
    for key in sorted(k for k in results if k.startswith("perf")):
        p = results[key]
        if "error" in p:
            lines.append(f"| {key} | error | | | | | {p['error']} |")
            continue
        L = f'{p["layers"]} L, {p["max_num_batched_tokens"]} tok/step'
        pl = max(p["plain_tokens_per_s"])
        m = p["mfu"]
        lines.append(f"| {L} | plain prefill | {pl:,.0f} | 100% | | | MFU 2PT {m['vs_989_dense_2PT']:.1%} of 989 / "
                     f"{m['vs_790_measured_2PT']:.1%} of 790 TF/s (with attention {m['vs_989_dense_with_attn']:.1%} / "
                     f"{m['vs_790_measured_with_attn']:.1%}) |")
        for v, s in p["variants"].items():
            if "error" in s:
                lines.append(f"| {L} | fast {v} | error | | | | {s['error']} |")
                continue
            lines.append(f"| {L} | fast {v} | {s['tokens_per_s']:,.0f} | {s['ratio_vs_plain']:.0%} | "
                         f"{s['host_copy_GBps']:.2f} | {s['disk_write_GBps']:.2f} | files valid {s['files_valid']}, "
                         f"write busy {s['t_write_s']:.1f}s, copy wait {s['t_wait_copy_s']:.2f}s, "
                         f"dispatch {s['t_dispatch_s']:.2f}s, backpressure {s['t_backpressure_s']:.2f}s |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--work", default="/tmp/fcwork")
    ap.add_argument("--part", choices=["all", "check", "perf", "env"], default="all")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--layer-set", default="8,32")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--mnbt", default="16384", help="max_num_batched_tokens; a comma list in 'all' mode")
    ap.add_argument("--variants", default="raw:4:fsync,raw:8:fsync,torch:4:fsync,raw:8:nofsync")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--skip-env", action="store_true")
    a = ap.parse_args()
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    local = work / "local"
    if a.part == "check":
        try:
            r = part_check(work)
        except Exception as e:  # noqa: BLE001
            import traceback
            r = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
        (out / "part_check.json").write_text(json.dumps(r, indent=1, default=str))
        return 0
    if a.part == "perf":
        try:
            r = part_perf(work, a.layers, a.prompts, a.length, int(a.mnbt), a.variants.split(","), local)
        except Exception as e:  # noqa: BLE001
            import traceback
            r = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
        (out / f"part_perf{a.layers}_{a.mnbt}.json").write_text(json.dumps(r, indent=1, default=str))
        return 0
    # all: env + each part in its own process (GPU memory is freed between engines)
    import vllm

    results = {"env": {"gpu": torch.cuda.get_device_name(), "vllm": vllm.__version__, "torch": torch.__version__,
                       "cpu_count": os.cpu_count()}}
    if a.skip_env:
        results["env"]["skipped"] = True
    else:
        results["env"].update(measure_env(local, work))
    print(json.dumps(results["env"], indent=1), flush=True)

    def save():
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        (out / "results.md").write_text(markdown(results))

    save()
    return run_parts(a, results, save, out, work)


def measure_env(local: Path, work: Path) -> dict:
    results = {"env": {}}
    results["env"]["d2h_GBps"] = d2h_bandwidth() / 1e9
    results["env"]["disk_GBps"] = disk_bandwidth(local / "ddtest") / 1e9
    results["env"]["disk_nofsync_GBps"] = disk_bandwidth(local / "ddtest", fsync=False) / 1e9
    try:
        results["env"]["shm_GBps"] = disk_bandwidth(Path("/dev/shm/ddtest"), total=2 << 30, fsync=False) / 1e9
    except Exception as e:  # noqa: BLE001
        results["env"]["shm_GBps"] = 0.0
        results["env"]["shm_error"] = str(e)
    results["env"]["df"] = subprocess.run(["df", "-h", str(work), "/dev/shm"], capture_output=True, text=True).stdout
    return results["env"]


def run_parts(a, results, save, out: Path, work: Path) -> int:
    me = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--work", str(work)]
    if not a.skip_check:
        subprocess.run(me + ["--part", "check"], check=False)
        try:
            results["check"] = json.loads((out / "part_check.json").read_text())
        except Exception as e:  # noqa: BLE001
            results["check"] = {"error": str(e)}
        save()
        print("check:", json.dumps({k: results["check"].get(k) for k in ("pass", "rel_err_max_per_layer", "error")}),
              flush=True)
    for layers, mnbt in [(int(x), int(m)) for x in a.layer_set.split(",") if x for m in a.mnbt.split(",")]:
        cmd = me + ["--part", "perf", "--layers", str(layers), "--prompts", str(a.prompts), "--length",
                    str(a.length), "--mnbt", str(mnbt), "--variants", a.variants]
        subprocess.run(cmd, check=False)
        try:
            results[f"perf{layers}_{mnbt}"] = json.loads((out / f"part_perf{layers}_{mnbt}.json").read_text())
        except Exception as e:  # noqa: BLE001
            results[f"perf{layers}_{mnbt}"] = {"error": str(e)}
        shutil.rmtree(work / f"llama{layers}", ignore_errors=True) if layers == 32 else None
        save()
    print(markdown(results), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
