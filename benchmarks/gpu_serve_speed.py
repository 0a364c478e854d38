"""Served decoding speed with and without the EAGLE-3 draft, at several batch sizes.

    python3 benchmarks/gpu_serve_speed.py --verifier V --draft CKPT/0 --prompts TOKENS.jsonl \\
        --out speed.json [--batches 1,8] [--n-prompts 16] [--max-tokens 256] [-k 3] [--eager]

Each engine (the verifier alone, then with the draft) runs in its own child process, with the
engine settings a server would use (CUDA graphs unless ``--eager``), greedy, ``ignore_eos`` so
both produce exactly ``--max-tokens`` tokens per prompt.  Per batch size ``b`` the prompts are
served ``b`` at a time, one ``generate`` call per group after a warm-up, and the rate is generated
tokens over the wall time of those calls.  The speed-up is the draft's rate over the verifier's
in the same run; the acceptance at each batch size comes from vLLM's spec-decode counters, and
the outputs of both engines are compared token for token (speculative decoding must not change
greedy output).  Prompts: one per generated turn of token rows (``eagle3 prepare``'s output),
as ``eagle3 serve-check --prompts`` takes them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _counter(metrics, name: str) -> float:  # noqa: ANN001
    return sum(float(m.value) for m in metrics if m.name == name and hasattr(m, "value"))


def serve(req: dict) -> dict:
    """One engine: every batch size in turn, timed, with the spec-decode counters per batch size."""
    from vllm import LLM, SamplingParams

    from eagle3_runner.common.environment import default_memory_share

    spec = {"method": "eagle3", "model": req["draft"], "num_speculative_tokens": req["k"]} if req["draft"] else None
    t0 = time.monotonic()
    llm = LLM(model=req["verifier"], speculative_config=spec, dtype=req["dtype"], enforce_eager=req["eager"],
              gpu_memory_utilization=min(0.5, default_memory_share()), max_model_len=req["max_model_len"],
              max_num_seqs=max(req["batches"]), disable_log_stats=False, seed=0)
    load_s = time.monotonic() - t0
    params = SamplingParams(temperature=0.0, max_tokens=req["max_tokens"], ignore_eos=True)
    prompts = [{"prompt_token_ids": p} for p in req["prompts"]]
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True), use_tqdm=False)
    out: dict = {"load_s": load_s, "batches": {}}
    for b in req["batches"]:
        before = llm.get_metrics()
        t = time.monotonic()
        outputs = []
        for i in range(0, len(prompts), b):
            outputs += [list(o.outputs[0].token_ids) for o in llm.generate(prompts[i:i + b], params, use_tqdm=False)]
        seconds = time.monotonic() - t
        after = llm.get_metrics()
        tokens = sum(len(o) for o in outputs)
        row = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "outputs": outputs}
        if spec:
            d = {n: _counter(after, f"vllm:spec_decode_num_{n}") - _counter(before, f"vllm:spec_decode_num_{n}")
                 for n in ("drafts", "draft_tokens", "accepted_tokens")}
            row["mean_acceptance_length"] = 1 + d["accepted_tokens"] / d["drafts"] if d["drafts"] else None
            row["acceptance_rate"] = d["accepted_tokens"] / d["draft_tokens"] if d["draft_tokens"] else None
            row["verifier_steps_per_token"] = d["drafts"] / tokens if tokens else None
        out["batches"][str(b)] = row
    return out


def _child(req: dict, timeout: float) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="serve_speed-") as tmp:
        rq, rs = Path(tmp) / "req.json", Path(tmp) / "res.json"
        rq.write_text(json.dumps(req))
        p = subprocess.run([sys.executable, __file__, "--child", str(rq), str(rs)], capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode or not rs.is_file():
            raise RuntimeError(f"engine failed (exit {p.returncode}):\n--- stdout ---\n{p.stdout[-20000:]}\n"
                               f"--- stderr ---\n{p.stderr[-20000:]}")
        return json.loads(rs.read_text())


def compare(verifier: Path, draft: Path, prompts: list[list[int]], batches: list[int], max_tokens: int, k: int,
            dtype: str, eager: bool, timeout: float = 600) -> dict:
    longest = max(len(p) for p in prompts)
    base = {"verifier": str(verifier), "draft": None, "prompts": prompts, "batches": batches, "max_tokens": max_tokens,
            "k": k, "dtype": dtype, "eager": eager, "max_model_len": -(-(longest + max_tokens + k + 8) // 32) * 32}
    alone = _child(base, timeout)
    with_draft = _child({**base, "draft": str(draft)}, timeout)
    rows = {}
    for b in map(str, batches):
        a, d = alone["batches"][b], with_draft["batches"][b]
        rows[b] = {"tokens_per_s_verifier": a["tokens_per_s"], "tokens_per_s_with_draft": d["tokens_per_s"],
                   "speedup": d["tokens_per_s"] / a["tokens_per_s"], "outputs_equal": a["outputs"] == d["outputs"],
                   "mean_acceptance_length": d.get("mean_acceptance_length"), "acceptance_rate": d.get("acceptance_rate"),
                   "ms_per_token_verifier": 1e3 * a["seconds"] / a["tokens"] * int(b),
                   "ms_per_token_with_draft": 1e3 * d["seconds"] / d["tokens"] * int(b)}
    return {"prompts": len(prompts), "max_tokens": max_tokens, "k": k, "dtype": dtype,
            "cuda_graphs": not eager, "load_s": {"verifier": alone["load_s"], "with_draft": with_draft["load_s"]},
            "batches": rows}


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        Path(sys.argv[3]).write_text(json.dumps(serve(json.loads(Path(sys.argv[2]).read_text()))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", type=Path, required=True)
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True, help="token rows (one prompt per generated turn)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs (the CPU build has none)")
    a = ap.parse_args(argv)
    from eagle3_runner.evaluate.serve_check import prompts_from_file

    prompts, _ = prompts_from_file(a.prompts, a.k)
    prompts = [list(p) for p in prompts[: a.n_prompts]]
    res = compare(a.verifier, a.draft, prompts, [int(b) for b in a.batches.split(",")], a.max_tokens, a.k, a.dtype,
                  a.eager)
    a.out.write_text(json.dumps(res, indent=1))
    for b, r in res["batches"].items():
        print(f"batch {b}: verifier {r['tokens_per_s_verifier']:,.0f} tok/s, with draft {r['tokens_per_s_with_draft']:,.0f} "
              f"tok/s, speed-up {r['speedup']:.2f}x, mean acceptance length {r['mean_acceptance_length']}, "
              f"outputs equal {r['outputs_equal']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
