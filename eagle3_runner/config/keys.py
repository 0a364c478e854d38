"""Every key of ``eagle3 run``'s config, section by section: its type, bounds, default and
meaning.  Defaults are read from the stages' own option types, so they are stated once.  The
stage commands take the same keys as flags (``COMMANDS``: which keys each command takes)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from ..extract import SYNC_MODES, ExtractOptions
from ..extract.backends import DTYPES
from ..prepare import prepare
from ..prepare.regenerate import RegenerateOptions
from ..prepare.synthesize import SynthesizeOptions
from ..train import DEFAULT_LR, MAX_VAL_SAMPLES, TrainOptions
from .schema import BOOL, FLOAT, INT, LAYERS, PATH, PATHS, SHARD, TEXT, Key


def _defaults(owner: Any) -> dict[str, Any]:
    """The defaults of a dataclass's fields or a function's keyword parameters."""
    if dataclasses.is_dataclass(owner):
        return {f.name: f.default for f in dataclasses.fields(owner) if f.default is not dataclasses.MISSING}
    return {n: p.default for n, p in inspect.signature(owner).parameters.items() if p.default is not p.empty}


_P, _R, _S = _defaults(prepare), _defaults(RegenerateOptions), _defaults(SynthesizeOptions)
_E, _T = _defaults(ExtractOptions), _defaults(TrainOptions)
BACKEND_NAMES = ("vllm", "vllm-fast", "hf")

TOP = (
    Key("workdir", PATH, "where the intermediate files and the checkpoint go", flag=None),
    Key("model", PATH, "the verifier (target) model: a local folder in Hugging Face format", flag=None),
)

PREPARE = (
    Key("data", PATHS, "chat rows: JSON lines, Parquet or a datasets folder (a list for several; optional with "
        "synthesize)", cli_default=None),
    Key("seq_length", INT, "truncate rows to this many tokens", _P["seq_length"], low=2),
    Key("chat_template", TEXT, "a Jinja file or a built-in (llama-3, chatml, deepseek, kimi) instead of the "
        "tokenizer's"),
    Key("format", TEXT, "row format (auto: detected per file)", _P["format"],
        choices=("auto", "messages", "sharegpt", "text")),
    Key("skip_bad", BOOL, "skip bad rows, listed in TOKENS.skipped.jsonl", _P["skip_bad"]),
    Key("regenerate", BOOL, "replace assistant turns by the model's own responses (vLLM; resumable: "
        "TOKENS.regenerated.jsonl); on by default in eagle3 run, a switch of eagle3 prepare", True,
        cli_default=False),
    Key("temperature", FLOAT, "regenerate: 0 = greedy", _R["temperature"], low=0),
    Key("top_p", FLOAT, "regenerate: nucleus sampling", _R["top_p"], low=0, high=1, low_open=True),
    Key("max_new_tokens", INT, "regenerate: the longest response", _R["max_new_tokens"], low=1),
    Key("seed", INT, "regenerate and synthesize: sampling seed", _R["seed"]),
    Key("regenerate_batch_size", INT, "rows per engine batch and side-file append", _R["batch_size"], low=1,
        flag="--batch-size"),
    Key("synthesize", INT, "add N user turns written by the model itself (Magpie), answered by it (implies "
        "regenerate; resumable: TOKENS.synthesized.jsonl)", low=1),
    Key("synthesize_max_tokens", INT, "a user turn reaching this many tokens is dropped as overlong",
        _S["max_tokens"], low=1),
    Key("synthesize_temperature", FLOAT, "synthesize: sampling temperature", _S["temperature"], low=0),
    Key("synthesize_top_p", FLOAT, "synthesize: nucleus sampling", _S["top_p"], low=0, high=1, low_open=True),
    Key("synthesize_starts", TEXT, "steer toward a workload: user turns open with these starts (a file, one a "
        "line; built-in: code), continued by the model"),
    Key("synthesize_starts_share", FLOAT, "the share of synthesized turns that take a start",
        _S["starts_share"], low=0, high=1),
)

EXTRACT = (
    Key("backend", TEXT, "vllm: speculators' generator, patched; vllm-fast: vLLM's LLM API with a worker "
        "extension that writes files in the worker (GPU speed); hf: transformers", _E["backend"],
        choices=BACKEND_NAMES),
    Key("layers", LAYERS, "layer ids (default 2, N//2, N-3, N; id N = the last layer's output before the final "
        "norm)"),
    Key("batch_size", INT, "prompts handed to the engine at once (default 32 with vllm, 8 with hf, 256 with "
        "vllm-fast)", low=1),
    Key("max_model_len", INT, "default: the longest row + 1, rounded up to 32", low=1),
    Key("dtype", TEXT, "auto: float32 on CPU for a float32 model", _E["dtype"], choices=DTYPES),
    Key("tensor_parallel_size", INT, "GPUs per vLLM engine", _E["tensor_parallel_size"], low=1),
    Key("shard", SHARD, "I/N: take the token lines with index % N == I (default: all)"),
    Key("site_packages", PATH, "folder holding the patched speculators (default: found on sys.path)"),
    Key("gpu_memory_utilization", FLOAT, "vLLM's memory share (default 0.8 on GPUs, 0.3 on CPU)",
        low=0, high=1, low_open=True),
    Key("sync", TEXT, "vllm-fast durability: end = one os.sync() before exit; each = fsync every file; none = "
        "leave write-back to the OS (a resume redoes torn files)", _E["sync"], choices=SYNC_MODES),
)

VOCAB = (
    Key("draft_vocab_size", INT, "default: the smallest multiple of 1024 holding 99% of the verifier's greedy "
        "tokens (else of the assistant tokens)", low=1),
    Key("target_vocab_size", INT, "default: the model's vocab_size (recorded by prepare)", low=1),
    Key("from_verifier", BOOL, "rank tokens by the verifier's top-1 predictions first", True, flag=None),
)

TRAIN = (
    Key("steps", INT, "optimizer steps (epochs overrides)", _T["steps"], low=1),
    Key("epochs", FLOAT, "passes over the training samples (overrides steps)", low=0, low_open=True),
    Key("device", TEXT, "auto: cuda when a GPU is seen", _T["device"], choices=("auto", "cpu", "cuda")),
    Key("lr", FLOAT, "peak learning rate", DEFAULT_LR, low=0, low_open=True),
    Key("warmup", FLOAT, "warm-up: a share of the steps (< 1) or a number of steps", _T["warmup"], low=0),
    Key("scheduler", TEXT, "learning-rate decay after the warm-up", _T["scheduler"],
        choices=("linear", "cosine", "none")),
    Key("eval_every", INT, "held-out acceptance every N steps, the best weights kept (default: 5 times a run; "
        "0 = off)", low=0),
    Key("max_minutes", FLOAT, "fast loop: end by this time (the schedule fitted to it), best weights kept",
        low=0, low_open=True),
    Key("loop", TEXT, "fast: the runner's loop around speculators' model (~10x on a GPU); speculators: its "
        "Trainer loop as is; auto: fast on CUDA, speculators on the CPU", _T["loop"],
        choices=("auto", "fast", "speculators")),
    Key("precision", TEXT, "fast loop: bf16 autocast with float32 weights (auto on CUDA) or fp32 (auto on CPU)",
        _T["precision"], choices=("auto", "bf16", "fp32")),
    Key("seed", INT, "training seed", _T["seed"]),
    Key("num_layers", INT, "draft decoder layers", _T["num_layers"], low=1),
    Key("ttt_steps", INT, "speculative positions trained (test-time training steps)", _T["ttt_steps"], low=1),
    Key("ttt_step_loss_decay", FLOAT, "loss weight decay per position", _T["ttt_step_loss_decay"], low=0),
    Key("max_len", INT, "tokens per packed batch", _T["max_len"], low=1),
    Key("noise_std", FLOAT, "uniform noise on the input states", _T["noise_std"], low=0),
    Key("compile", BOOL, "keep speculators' torch.compile on (always: fast loop, CUDA)", _T["compile"]),
    Key("nproc", INT, "> 1: run under torchrun with this many processes (FSDP)", 1, low=1),
    Key("val_fraction", FLOAT, f"samples held out for the acceptance evaluation (at most {MAX_VAL_SAMPLES}; 0 = "
        "none)", _T["val_fraction"], low=0, high=1),
)

SERVE_CHECK = (
    Key("enabled", BOOL, "vLLM serves the draft on the held-out turns (serve_check.json)", True, flag=None),
    Key("tolerance", FLOAT, "fail (exit 7) when served and offline acceptance per position differ by more",
        low=0, high=1, flag=None),
    Key("dtype", TEXT, "the verifier's dtype (default: the held-out samples' extraction dtype, else auto)",
        choices=DTYPES),
    Key("speed", TEXT, "time serving with and without the draft at batch 1 and 8 (tokens/s, the speed-up: "
        "serve_check.json's speed; eagle3 serve-check --speed); auto: where a GPU is present", "auto",
        choices=("auto", "on", "off"), flag=None),
)

SECTIONS: dict[str, tuple[Key, ...]] = {
    "": TOP, "prepare": PREPARE, "extract": EXTRACT, "vocab": VOCAB, "train": TRAIN, "serve_check": SERVE_CHECK,
}
REQUIRED = ("workdir", "model")

# The stage commands' flags: (help group or None, section, its keys).
COMMANDS: dict[str, tuple[tuple[str | None, str, tuple[str, ...]], ...]] = {
    "prepare": (
        (None, "prepare", ("data", "seq_length", "chat_template", "format", "skip_bad")),
        ("regenerate (vLLM)", "prepare", ("regenerate", "temperature", "top_p", "max_new_tokens", "seed",
                                          "regenerate_batch_size")),
        ("regenerate (vLLM)", "extract", ("dtype", "tensor_parallel_size", "gpu_memory_utilization")),
        ("synthesize (vLLM; implies --regenerate)", "prepare", (
            "synthesize", "synthesize_max_tokens", "synthesize_temperature", "synthesize_top_p",
            "synthesize_starts", "synthesize_starts_share")),
    ),
    "extract": ((None, "extract", tuple(k.name for k in EXTRACT)),),
    "vocab": ((None, "vocab", ("draft_vocab_size", "target_vocab_size")),),
    "train": ((None, "train", tuple(k.name for k in TRAIN)),),
    "serve-check": ((None, "serve_check", ("dtype",)),),
}


def key(section: str, name: str) -> Key:
    return next(k for k in SECTIONS[section] if k.name == name)
