"""A speculative decoding step taken apart, from a torch profiler trace of vLLM's worker.

    python3 benchmarks/trace_summary.py TRACE.pt.trace.json[.gz]

The trace comes from vLLM's own profiler (``llm.start_profile()`` / ``stop_profile()`` with
``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``, so the model runner's phases are named spans:
``gpu_model_runner: forward``, ``sample``, ``draft``, ``bookkeep``, ...).  Per engine step (one
verifier forward) it reports:

* ``phases``: for each named span, its host time, the GPU kernel time of the kernels launched
  inside it, and how they were launched (CUDA graph replays vs single kernel launches);
* ``gpu``: kernel time by kind (GEMM, attention, sampling, ...), the busy share of the GPU over
  the profiled window, and the largest kernels;
* ``syncs``: host time blocked in CUDA synchronisations, by the phase that blocked.

Kernels are tied to their launch by CUPTI's correlation id; a launch belongs to the innermost
named span around it on the same thread.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

KINDS = (  # first match wins
    ("gemm", re.compile(r"gemm|gemv|cutlass|nvjet|xmma|cublas|matmul|splitk", re.I)),
    ("attention", re.compile(r"flash|fmha|attn|attention|paged|mla", re.I)),
    ("sampling", re.compile(r"rejection|sampl|argmax|topk|top_k|softmax|gumbel|expand|ngram", re.I)),
    ("norm/rope/act", re.compile(r"rms|norm|rotary|rope|silu|act_and_mul|gelu", re.I)),
    ("memcpy/memset", re.compile(r"^memcpy|^memset|Memcpy|Memset", re.I)),
    ("triton (fused)", re.compile(r"^triton_", re.I)),
)
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
SYNCS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpyAsync")
STEP_SPAN = "gpu_model_runner: forward"
WHOLE_STEP = "execute_model (execute_context_*: the whole step)"
DECODE_STEP = re.compile(r"execute_context_0\(0\)_generation_[1-9]")  # a step of decodes only


def kind_of(name: str) -> str:
    for kind, pat in KINDS:
        if pat.search(name):
            return kind
    return "other"


def load(path: Path) -> list[dict[str, Any]]:
    raw = gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)
    with raw as f:
        data = json.load(f)
    return [e for e in data.get("traceEvents", data) if isinstance(e, dict) and e.get("ph") == "X"]


class _Spans:
    """Named spans per thread, for 'which span was this host event in' lookups."""

    def __init__(self, spans: list[dict[str, Any]]) -> None:
        self.by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for s in spans:
            self.by_tid[s.get("tid")].append(s)
        for lst in self.by_tid.values():
            lst.sort(key=lambda s: s["ts"])
        self.starts = {tid: [s["ts"] for s in lst] for tid, lst in self.by_tid.items()}

    def innermost(self, tid: Any, ts: float) -> str | None:
        lst = self.by_tid.get(tid)
        if not lst:
            return None
        i = bisect.bisect_right(self.starts[tid], ts)
        best = None
        for s in reversed(lst[max(0, i - 64):i]):  # spans nest, few are open at once
            if s["ts"] <= ts <= s["ts"] + s["dur"] and (best is None or s["dur"] < best["dur"]):
                best = s
        return best["name"] if best else None


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summarize(events: list[dict[str, Any]], top: int = 12) -> dict[str, Any]:
    spans = [e for e in events if e.get("cat") == "user_annotation"]
    steps = [s for s in spans if s["name"] == STEP_SPAN]
    if not steps:  # Model Runner V2 (vLLM >= 0.26) names only the whole step, after its batch
        steps = [s for s in spans if DECODE_STEP.match(s["name"])]
    n = len(steps)
    if not n:
        return {"steps": 0, "note": f"no '{STEP_SPAN}' span: VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 was not set?"}
    lookup = _Spans(spans)
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    phase_of_corr: dict[Any, str] = {}
    graph_corr: set[Any] = set()
    phases: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    sync_by_phase: dict[str, float] = defaultdict(float)
    for r in runtime:
        phase = lookup.innermost(r.get("tid"), r["ts"]) or "(outside named spans)"
        phase = WHOLE_STEP if phase.startswith("execute_context_") else phase
        corr = (r.get("args") or {}).get("correlation")
        if corr is not None:
            phase_of_corr[corr] = phase
        if r["name"] == "cudaGraphLaunch":
            phases[phase]["graph_launches"] += 1
            graph_corr.add(corr)
        elif r["name"] in LAUNCHES:
            phases[phase]["kernel_launches"] += 1
        if r["name"] in SYNCS and not (r["name"] == "cudaMemcpyAsync" and r["dur"] < 20):
            sync_by_phase[phase] += r["dur"]
    for s in spans:
        name = WHOLE_STEP if s["name"].startswith("execute_context_") else s["name"]
        phases[name]["host_us"] += s["dur"]
        phases[name]["count"] += 1
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    graph_us = 0.0
    for k in kernels:
        corr = (k.get("args") or {}).get("correlation")
        phase = phase_of_corr.get(corr, "(unattributed)")
        phases[phase]["gpu_us"] += k["dur"]
        if corr in graph_corr:
            graph_us += k["dur"]
            phases[phase]["gpu_us_in_graphs"] += k["dur"]
        by_kind[kind_of(k["name"])] += k["dur"]
        by_name[k["name"]][0] += k["dur"]
        by_name[k["name"]][1] += 1
    window = (min(s["ts"] for s in steps), max(s["ts"] + s["dur"] for s in steps))
    busy = _union([(k["ts"], k["ts"] + k["dur"]) for k in kernels if window[0] <= k["ts"] <= window[1]])
    per = 1e-3 / n  # us -> ms per step
    wall_ms = (window[1] - window[0]) * 1e-3 / max(1, n - 1) if n > 1 else None
    return {
        "steps": n,
        "ms_per_step_profiled": wall_ms,
        "phases": {name: {"host_ms": round(v["host_us"] * per, 4), "gpu_ms": round(v["gpu_us"] * per, 4),
                          "gpu_ms_in_graphs": round(v["gpu_us_in_graphs"] * per, 4),
                          "graph_launches": round(v["graph_launches"] / n, 2),
                          "kernel_launches": round(v["kernel_launches"] / n, 2), "calls": round(v["count"] / n, 2)}
                   for name, v in sorted(phases.items(), key=lambda kv: -kv[1]["host_us"])},
        "gpu": {"busy_share": round(busy / (window[1] - window[0]), 4) if window[1] > window[0] else None,
                "kernel_ms": round(sum(by_kind.values()) * per, 4),
                "kernel_ms_in_graphs": round(graph_us * per, 4),
                "by_kind_ms": {k: round(v * per, 4) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
                "top_kernels": [{"name": name[:120], "ms": round(v[0] * per, 4), "per_step": round(v[1] / n, 2)}
                                for name, v in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]]},
        "syncs_ms": {p: round(v * per, 4) for p, v in sorted(sync_by_phase.items(), key=lambda kv: -kv[1]) if v},
    }


def newest_trace(folder: Path) -> Path | None:
    found = sorted(Path(folder).rglob("*.pt.trace.json*"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


if __name__ == "__main__":
    print(json.dumps(summarize(load(Path(sys.argv[1]))), indent=1))
