"""The fast path's driver: an ``LLM`` built for capture, samples in, small summaries out.

Only counts travel back from the worker; the states never leave it except as files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ....common.atomic import clean_temporaries, fsync_dir
from ....common.formats import sample_path
from .files import valid_sample_file
from .worker import EXTENSION, EXTRA_KEY

Samples = Iterable[tuple[int, Sequence[int], Sequence[int]]]  # (index, input_ids, loss_mask)


def make_llm(model_dir: str | os.PathLike, *, max_model_len: int, tensor_parallel_size: int = 1,
             dtype: str = "auto", gpu_memory_utilization: float = 0.9,
             max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
             **kwargs: Any) -> Any:
    """An ``LLM`` set up for the fast path: our worker extension, eager, prefix caching off (a
    cached prefix skips the forward pass, and its states would never be seen)."""
    from vllm import LLM

    args: dict[str, Any] = dict(
        model=str(model_dir),
        worker_extension_cls=EXTENSION,
        enable_prefix_caching=False,
        enforce_eager=True,
        max_model_len=int(max_model_len),
        tensor_parallel_size=int(tensor_parallel_size),
        dtype=dtype,
        gpu_memory_utilization=float(gpu_memory_utilization),
        skip_tokenizer_init=True,
    )
    if max_num_batched_tokens:
        args["max_num_batched_tokens"] = int(max_num_batched_tokens)
    if max_num_seqs:
        args["max_num_seqs"] = int(max_num_seqs)
    args.update(kwargs)
    return LLM(**args)


def _rank0(results: Any) -> Any:
    if isinstance(results, list):
        return next((r for r in results if r is not None), None)
    return results


def setup_capture(llm: Any, layer_ids: Sequence[int], writer_threads: int = 8, write_mode: str = "raw",
                  fsync: bool = True, max_pending_bytes: int = 8 << 30) -> dict:
    """Install the capture in the workers (hooks, writer threads, the pinned host pool, which
    costs ``cudaHostAlloc`` once); returns what rank 0 reports (hidden size, dtype, runner)."""
    return _rank0(llm.collective_rpc("fc_setup", args=(list(layer_ids), writer_threads, write_mode,
                                                       fsync, max_pending_bytes)))


def run_fast(llm: Any, samples: Samples, out_dir: str | os.PathLike, layer_ids: Sequence[int],
             batch_size: int = 256, resume: bool = True, writer_threads: int = 8, write_mode: str = "raw",
             fsync: bool = True, max_pending_bytes: int = 8 << 30, max_model_len: int | None = None,
             setup: dict | None = None) -> dict:
    """Capture ``samples`` with an ``LLM`` made by :func:`make_llm`; return a small summary.

    Writes ``out_dir/data_{index}.pt`` per sample (speculators' format); with ``resume`` skips
    indexes whose file exists and is valid.  ``setup``: what :func:`setup_capture` returned,
    if the caller installed the capture already (the other writer arguments are then its).
    Returns counts, bad samples and timings; the capture is removed at the end."""
    from vllm import SamplingParams

    try:
        from vllm.inputs import TokensPrompt
    except ImportError:  # pragma: no cover
        TokensPrompt = dict  # type: ignore[assignment,misc]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    clean_temporaries(out_dir)
    if setup is None:
        setup = setup_capture(llm, layer_ids, writer_threads, write_mode, fsync, max_pending_bytes)
    hidden = int(setup["hidden_size"])
    skipped: list[int] = []
    rejected: list[list] = []
    submitted = tokens = 0

    def flush(batch: list) -> None:
        nonlocal submitted, tokens
        if not batch:
            return
        llm.collective_rpc("fc_register", args=([(i, ids, lm, str(sample_path(out_dir, i)))
                                                 for i, ids, lm in batch],))
        prompts = [TokensPrompt(prompt_token_ids=ids) for _, ids, _ in batch]
        params = [SamplingParams(max_tokens=1, detokenize=False, extra_args={EXTRA_KEY: int(i)})
                  for i, _, _ in batch]
        llm.generate(prompts, params, use_tqdm=False)
        submitted += len(batch)
        tokens += sum(len(ids) for _, ids, _ in batch)

    batch: list = []
    seen: set[int] = set()
    for index, input_ids, loss_mask in samples:
        index = int(index)
        ids = [int(x) for x in input_ids]
        lm = [int(x) for x in loss_mask]
        if index in seen:
            rejected.append([index, "duplicate index"])
            continue
        seen.add(index)
        if len(ids) == 0 or len(ids) != len(lm):
            rejected.append([index, "empty sample or loss_mask length differs from input_ids"])
            continue
        if max_model_len is not None and len(ids) > max_model_len - 1:
            rejected.append([index, f"longer than max_model_len - 1 ({len(ids)} tokens)"])
            continue
        if resume and valid_sample_file(sample_path(out_dir, index), ids, len(layer_ids), hidden):
            skipped.append(index)
            continue
        batch.append((index, ids, lm))
        if len(batch) >= batch_size:
            flush(batch)
            batch = []
    flush(batch)
    worker = _rank0(llm.collective_rpc("fc_drain", args=(None,))) or {}
    fsync_dir(out_dir)
    wall = time.perf_counter() - t0
    llm.collective_rpc("fc_close")
    return {"submitted": submitted, "skipped_existing": len(skipped), "rejected": rejected, "tokens": tokens,
            "wall_s": wall, "tokens_per_s": tokens / wall if wall > 0 else None, "setup": setup, **worker}


def extract_fast(model_dir: str | os.PathLike, samples: Samples, out_dir: str | os.PathLike,
                 layer_ids: Sequence[int], batch_size: int = 256, max_model_len: int = 4096,
                 tensor_parallel_size: int = 1, dtype: str = "auto", gpu_memory_utilization: float = 0.9,
                 max_num_batched_tokens: int | None = None, resume: bool = True, writer_threads: int = 8,
                 write_mode: str = "raw", fsync: bool = True, **llm_kwargs: Any) -> dict:
    """:func:`make_llm` + :func:`run_fast` in one call."""
    llm = make_llm(model_dir, max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                   dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                   max_num_batched_tokens=max_num_batched_tokens, **llm_kwargs)
    try:
        return run_fast(llm, samples, out_dir, layer_ids, batch_size=batch_size, resume=resume,
                        writer_threads=writer_threads, write_mode=write_mode, fsync=fsync,
                        max_model_len=max_model_len)
    finally:
        del llm
