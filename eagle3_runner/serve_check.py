"""Serve a trained EAGLE-3 draft with vLLM (``speculative_config`` method ``eagle3``) and measure
its acceptance rate against the verifier.

vLLM reads the speculators-format checkpoint directly (``speculators_model_type: eagle3``,
``d2t``/``t2d`` in the weights, the aux layer ids from ``eagle_aux_hidden_state_layer_ids``).
Note: vLLM collects the aux hidden states by *set* of layer ids, so a draft whose aux layer ids
repeat (e.g. ``2,3,3``, the default for a 6-layer verifier) fails in vLLM with a shape error in
``combine_hidden_states``; train drafts with distinct aux layer ids (``extract --layers``).

``acceptance_rate`` runs vLLM in a child process (one engine per call, torn down with it), so it
can be called from tests and from code that already imported torch/vLLM::

    python -m eagle3_runner.serve_check VERIFIER DRAFT --prompts prompts.json --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Prompt = str | Sequence[int]


def _metric_value(metrics: Any, name: str) -> float:
    total = 0.0
    for m in metrics:
        if m.name == name and hasattr(m, "value"):
            total += float(m.value)
    return total


def _run_in_process(verifier: str, draft: str, prompts: list[Prompt], max_tokens: int,
                    num_speculative_tokens: int, max_model_len: int) -> dict[str, Any]:
    import time

    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    llm = LLM(
        model=verifier,
        speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": num_speculative_tokens},
        dtype="float32", enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=max_model_len,
        max_num_seqs=max(1, len(prompts)), disable_log_stats=False, seed=0,
    )
    t1 = time.monotonic()
    inputs = [{"prompt": p} if isinstance(p, str) else {"prompt_token_ids": list(p)} for p in prompts]
    outs = llm.generate(inputs, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
                        use_tqdm=False)
    t2 = time.monotonic()
    metrics = llm.get_metrics()
    drafted = _metric_value(metrics, "vllm:spec_decode_num_draft_tokens")
    accepted = _metric_value(metrics, "vllm:spec_decode_num_accepted_tokens")
    drafts = _metric_value(metrics, "vllm:spec_decode_num_drafts")
    per_pos = [float(x) for m in metrics if m.name == "vllm:spec_decode_num_accepted_tokens_per_pos"
               for x in (getattr(m, "values", None) or [])]
    return {
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "accepted_tokens": int(accepted), "draft_tokens": int(drafted), "drafts": int(drafts),
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "accepted_per_position": per_pos,
        "num_speculative_tokens": num_speculative_tokens,
        "outputs": [list(o.outputs[0].token_ids) for o in outs],
        "load_seconds": t1 - t0, "generate_seconds": t2 - t1,
    }


def acceptance_rate(verifier: Path | str, draft: Path | str, prompts: Sequence[Prompt], max_tokens: int = 32,
                    num_speculative_tokens: int = 3, max_model_len: int = 512, timeout: float = 900,
                    env: dict[str, str] | None = None) -> dict[str, Any]:
    """Greedy generation of ``prompts`` (text or token ids) by ``verifier`` with ``draft`` as its
    EAGLE-3 speculator, in a child process; returns ``acceptance_rate`` (accepted / drafted
    tokens, from vLLM's ``spec_decode`` counters), the counts, the generated token ids and timings."""
    with tempfile.TemporaryDirectory(prefix="serve_check-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps({
            "verifier": str(verifier), "draft": str(draft), "prompts": [p if isinstance(p, str) else list(p)
                                                                        for p in prompts],
            "max_tokens": max_tokens, "num_speculative_tokens": num_speculative_tokens,
            "max_model_len": max_model_len,
        }))
        proc = subprocess.run([sys.executable, "-m", "eagle3_runner.serve_check", "--request", str(req),
                               "--result", str(res)], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        if proc.returncode or not res.is_file():
            raise RuntimeError(f"vLLM eagle3 serving failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
        return json.loads(res.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eagle3_runner.serve_check", description=__doc__.splitlines()[0])
    p.add_argument("verifier", nargs="?")
    p.add_argument("draft", nargs="?")
    p.add_argument("--prompts", type=Path, help="JSON list of prompts (strings or token-id lists)")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--num-speculative-tokens", type=int, default=3)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--request", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.request:
        r = json.loads(a.request.read_text())
        out = _run_in_process(r["verifier"], r["draft"], r["prompts"], r["max_tokens"], r["num_speculative_tokens"],
                              r["max_model_len"])
        a.result.write_text(json.dumps(out))
        return 0
    if not (a.verifier and a.draft and a.prompts):
        p.error("give VERIFIER DRAFT --prompts FILE")
    out = _run_in_process(a.verifier, a.draft, json.loads(a.prompts.read_text()), a.max_tokens,
                          a.num_speculative_tokens, a.max_model_len)
    out.pop("outputs")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
