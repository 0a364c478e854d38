"""``eagle3 extract``: token rows -> one hidden-state sample file per row.

Output: ``OUT/data_{i}.pt`` for token line ``i`` (0-based, the global line index, also under
``--shard``) in speculators' v1 format, plus ``OUT/data_config.json``.  See
:mod:`eagle3_runner.common.layers` for which states the layer ids name.

Guarantees:

* every file is written atomically (temporary sibling, ``os.replace``): after a SIGKILL there
  are only complete files, and a re-run skips every line whose file loads and matches
  (structure, shapes, token ids) and redoes the others, so the result is exactly one valid file
  per line.  ``--sync``: ``end`` (default) flushes everything with one ``os.sync()`` before the
  command returns (counted in its rate), ``each`` fsyncs every file, ``none`` leaves write-back
  to the OS; a power cut before the flush can leave truncated files, which the resume check
  loads, rejects and redoes;
* every sample is validated before it is written (finite, lengths, layer count, hidden size,
  token ids); a bad one is logged with its line index and not written, the others still are,
  and the run ends with exit code 5;
* ``--shard I/N`` takes the lines with ``index % N == I`` (round-robin, so shards get similar
  length mixes); shards can run concurrently into the same ``OUT``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.atomic import clean_temporaries, fsync_dir, write_json
from .backends import DTYPES, BackendOptions, backend_class
from ..common.errors import UsageError
from ..common.formats import (
    DATA_CONFIG, TokenRow, build_sample, existing_sample_ok, read_token_rows, sample_path, sample_problems,
)
from ..common.environment import default_memory_share, load_model_config, versions
from ..common.layers import CONVENTION, hidden_size, num_layers, parse_layer_ids

logger = logging.getLogger(__name__)

FORMAT = "speculators-v1: data_{i}.pt = {input_ids: LongTensor[T], hidden_states: [Tensor[T,H] per layer id], loss_mask: LongTensor[T]}"
SHARDING = "round-robin: shard I/N takes token lines with index % N == I"
# data_config keys that must agree between runs writing into the same folder
COMPAT_KEYS = ("model", "layer_ids", "backend", "dtype_requested")
# durability: one os.sync() at the end, an fsync per file, or none (files are renamed into place)
SYNC_MODES = ("end", "each", "none")
# prompts per engine call: vllm returns them to the driver (32 = the generator's max_num_seqs),
# vllm-fast only counts
DEFAULT_BATCH = {"vllm": 32, "hf": 8, "vllm-fast": 256}
WRITERS = 8  # threads validating and writing the files of the backends that return states


@dataclass(frozen=True)
class ExtractOptions:
    model: Path
    input: Path
    output: Path
    layers: str | Sequence[int] | None = None
    batch_size: int | None = None  # None: DEFAULT_BATCH[backend]
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    shard: tuple[int, int] = (0, 1)
    dtype: str = "auto"
    backend: str = "vllm"
    site_packages: str | None = None
    gpu_memory_utilization: float | None = None
    sync: str = "end"  # vllm-fast: one of SYNC_MODES


@dataclass
class ExtractResult:
    output: Path
    layer_ids: list[int]
    total: int  # lines in this shard
    written: int = 0
    skipped: int = 0  # already done by an earlier run
    bad: list[tuple[int, list[str]]] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0


def parse_shard(spec: str | None) -> tuple[int, int]:
    if not spec:
        return (0, 1)
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise UsageError(f"--shard must look like I/N (e.g. 0/4), got {spec!r}") from None
    if n < 1 or not 0 <= i < n:
        raise UsageError(f"--shard {spec}: need 0 <= I < N")
    return (i, n)


def default_max_model_len(rows: Sequence[TokenRow]) -> int:
    """Room for the longest row plus the one token the generator samples, rounded up to 32."""
    need = max(len(r.input_ids) for r in rows) + 1
    return max(256, -(-need // 32) * 32)


def _check_compatible(out: Path, wanted: dict[str, Any]) -> None:
    path = out / DATA_CONFIG
    if not path.is_file():
        return
    import json

    try:
        have = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # unreadable: rewritten below
    diff = {k: (have.get(k), wanted[k]) for k in COMPAT_KEYS if have.get(k) != wanted[k]}
    if diff:
        detail = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
        raise UsageError(f"{out} holds samples made differently ({detail}); use another --output folder")


def _batches(rows: Sequence[TokenRow], size: int) -> Iterator[list[TokenRow]]:
    for start in range(0, len(rows), size):
        yield list(rows[start : start + size])


def extract(opts: ExtractOptions) -> ExtractResult:
    if opts.dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}")
    if opts.sync not in SYNC_MODES:
        raise UsageError(f"--sync must be one of {', '.join(SYNC_MODES)}")
    if opts.batch_size is not None and opts.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    batch_size = opts.batch_size or DEFAULT_BATCH.get(opts.backend, 8)
    backend_cls = backend_class(opts.backend) if opts.backend != "vllm-fast" else None
    config = load_model_config(opts.model)
    n_layers, hidden = num_layers(config), hidden_size(config)
    layer_ids = parse_layer_ids(opts.layers, n_layers)
    rows = read_token_rows(opts.input, getattr(config, "vocab_size", None))
    shard_i, shard_n = opts.shard
    mine = [r for r in rows if r.index % shard_n == shard_i]
    out = Path(opts.output)
    out.mkdir(parents=True, exist_ok=True)
    clean_temporaries(out)

    data_config: dict[str, Any] = {
        "model": str(Path(opts.model).absolute()),
        "layer_ids": layer_ids,
        "num_hidden_layers": n_layers,
        "hidden_size": hidden,
        "capture_convention": CONVENTION,
        "format": FORMAT,
        "sharding": SHARDING,
        "backend": opts.backend,
        "dtype_requested": opts.dtype,
        "num_lines": len(rows),
        "input": str(Path(opts.input).absolute()),
    }
    _check_compatible(out, data_config)

    result = ExtractResult(out, layer_ids, total=len(mine))
    n_states = len(layer_ids)
    todo = [
        r for r in mine
        if not existing_sample_ok(sample_path(out, r.index), num_layers=n_states, hidden_size=hidden, input_ids=r.input_ids)
    ]
    result.skipped = len(mine) - len(todo)
    if result.skipped:
        logger.info("%d of %d samples already done, %d to go", result.skipped, len(mine), len(todo))

    max_len = opts.max_model_len or default_max_model_len(rows)
    too_long = [r for r in todo if len(r.input_ids) > max_len - 1]
    for r in too_long:
        result.bad.append((r.index, [f"{len(r.input_ids)} tokens do not fit --max-model-len {max_len} (max {max_len - 1})"]))
        logger.error("sample %d: %d tokens do not fit --max-model-len %d", r.index, len(r.input_ids), max_len)
    todo = [r for r in todo if len(r.input_ids) <= max_len - 1]
    if not todo:
        if not (out / DATA_CONFIG).is_file():
            write_json(out / DATA_CONFIG, data_config | {"versions": versions()})
        return result

    if opts.backend == "vllm-fast":
        return _extract_fast(opts, out, todo, layer_ids, max_len, batch_size, data_config, result)
    patch_state = None
    if opts.backend == "vllm":
        from .preflight import speculators_site, verify_patch_state

        patch_state = verify_patch_state(speculators_site(opts.site_packages))
    options = BackendOptions(
        model=Path(opts.model),
        layer_ids=tuple(layer_ids),
        dtype=opts.dtype,
        max_model_len=max_len,
        tensor_parallel_size=opts.tensor_parallel_size,
        gpu_memory_utilization=opts.gpu_memory_utilization or default_memory_share(),
        site_packages=str(patch_state.site) if patch_state else opts.site_packages,
    )
    with backend_cls(options) as backend:
        started = time.monotonic()  # rates exclude the engine's start and shutdown
        write_json(out / DATA_CONFIG, data_config | {
            "dtype": backend.ran_dtype,
            "max_model_len": max_len,
            "versions": versions() | backend.info(),
            "patches_applied": list(patch_state.applied) if patch_state else None,
            "speculators_site": str(patch_state.site) if patch_state else None,
        })
        _run_backend(backend, out, todo, batch_size, n_states, hidden, opts.sync, result)
        result.seconds = time.monotonic() - started  # before the engine's shutdown, like its start
    result.bad.sort()
    return result


def _run_backend(backend: Any, out: Path, todo: list[TokenRow], batch_size: int, n_states: int, hidden: int,
                 sync: str, result: ExtractResult) -> None:
    """Every batch through ``backend`` while the previous one is validated and written: the
    engine runs in one thread, the files in :data:`WRITERS` more (validation and the raw
    writer's ``os.pwrite`` release the GIL), so the engine never waits for the disk."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    by_index = {r.index: r for r in todo}
    batches = list(_batches(todo, batch_size))
    started = time.monotonic()

    def run(batch: list[TokenRow]) -> list[tuple[int, list[Any]]]:
        return list(backend.run([(r.index, r.input_ids) for r in batch]))

    with _progress(len(todo)) as bar, ThreadPoolExecutor(1, thread_name_prefix="engine") as engine, \
            ThreadPoolExecutor(WRITERS, thread_name_prefix="writer") as writers:
        pending = engine.submit(run, batches[0])
        for k, batch in enumerate(batches):
            produced = pending.result()
            if k + 1 < len(batches):
                pending = engine.submit(run, batches[k + 1])
            stores = [(index, writers.submit(_store, out, by_index[index], states, n_states, hidden, sync == "each"))
                      for index, states in produced]
            del produced  # each sample's states live until its file is written
            seen: set[int] = set()
            for index, store in stores:
                problems = store.result()
                seen.add(index)
                if problems:
                    result.bad.append((index, problems))
                    logger.error("sample %d not written: %s", index, "; ".join(problems))
                else:
                    result.written += 1
                result.tokens += len(by_index[index].input_ids)
                bar.update(1)
                bar.set_postfix_str(f"{result.tokens / max(time.monotonic() - started, 1e-9):,.0f} tok/s", refresh=False)
            for r in batch:
                if r.index not in seen:
                    result.bad.append((r.index, ["the backend returned no states"]))
                    logger.error("sample %d: the backend returned no states", r.index)
    fsync_dir(out)
    if sync == "end":
        os.sync()  # counted: durable files are part of the job


def _extract_fast(opts: ExtractOptions, out: Path, todo: list[TokenRow], layer_ids: list[int], max_len: int,
                  batch_size: int, data_config: dict[str, Any], result: ExtractResult) -> ExtractResult:
    """``--backend vllm-fast``: vLLM's public ``LLM`` with a worker extension that captures,
    validates and writes every sample inside the worker (:mod:`eagle3_runner.extract.backends.vllm_fast`);
    only counts travel back.  No speculators code runs, so no patch state is needed.

    ``--sync each`` is disk-bound on the H200 (29% of prefill against 89%).  The capture's
    setup (hooks, its pinned host pool) is part of the engine's start, which rates exclude.
    """
    import os

    from .backends.vllm_fast import make_llm, run_fast, setup_capture

    llm = make_llm(opts.model, max_model_len=max_len, tensor_parallel_size=opts.tensor_parallel_size,
                   dtype=opts.dtype, gpu_memory_utilization=opts.gpu_memory_utilization or default_memory_share())
    try:
        setup = setup_capture(llm, layer_ids, fsync=opts.sync == "each")
        started = time.monotonic()  # rates exclude the engine's start and shutdown, as for the other backends
        summary = run_fast(llm, ((r.index, r.input_ids, r.loss_mask) for r in todo), out, layer_ids,
                           batch_size=batch_size, resume=False, max_model_len=max_len, setup=setup)
        if opts.sync == "end":
            os.sync()  # counted: durable files are part of the job
        result.seconds = time.monotonic() - started
    finally:
        del llm
    write_json(out / DATA_CONFIG, data_config | {
        "dtype": summary["setup"].get("dtype"),
        "max_model_len": max_len,
        "versions": versions(),
        "patches_applied": None,
        "speculators_site": None,
    })
    result.written = int(summary.get("written", 0))
    result.tokens = int(summary.get("tokens", 0))
    for index, why in [*summary.get("rejected", []), *summary.get("bad", [])]:
        result.bad.append((int(index), [str(why)]))
        logger.error("sample %s not written: %s", index, why)
    result.bad.sort()
    logger.info("vllm-fast: %d written, %.0f tokens/s end to end", result.written, result.tokens / max(result.seconds, 1e-9))
    return result


def _store(out: Path, row: TokenRow, states: list[Any], n_states: int, hidden: int, fsync: bool) -> list[str]:
    """Validate one sample and write it atomically; return its problems (none: written)."""
    from .backends.vllm_fast.files import write_sample_atomic

    sample = build_sample(row.input_ids, row.loss_mask, states)
    problems = sample_problems(sample, num_layers=n_states, hidden_size=hidden, input_ids=row.input_ids)
    if not problems:
        owned = all(h.untyped_storage().nbytes() == h.numel() * h.element_size() for h in sample["hidden_states"])
        write_sample_atomic(sample_path(out, row.index), sample, "raw" if owned else "torch", fsync=fsync)
    return problems


def _progress(total: int) -> Any:
    from ..common.progress import bar

    return bar(total, "extract", "sample")
