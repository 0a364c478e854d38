"""``eagle3``: the command line (parsing, printing, exit codes). Library modules never print."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .cli_serve import acceptance_table, cmd_serve_check, speed_table
from .common.errors import EXIT_CODES_HELP, ExitCode, RunnerError

DESCRIPTION = "From chat data to a trained EAGLE-3 draft on the (vllm-compat patched) speculators stack."


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="eagle3", description=DESCRIPTION, epilog=EXIT_CODES_HELP, formatter_class=fmt)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, help: str, doc: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=doc or help, epilog=EXIT_CODES_HELP, formatter_class=fmt)

    from . import evaluate as eval_mod
    from . import extract as extract_mod
    from . import prepare as prepare_mod
    from . import cli_serve
    from .evaluate import serve_check as serve_mod
    from . import run as run_mod
    from . import train as train_mod
    from .train import vocab as vocab_mod

    s = cmd("prepare", "chat or text rows -> token rows with a loss mask", prepare_mod.__doc__)
    s.add_argument("--model", required=True, type=Path, help="model folder (its tokenizer, and its chat template by default)")
    s.add_argument("--data", type=Path, action="append",
                   help="JSON lines, Parquet or a datasets folder (repeat for several; optional with --synthesize)")
    s.add_argument("--output", required=True, type=Path, help="token JSON lines (side files go next to it)")
    s.add_argument("--seq-length", type=int, default=2048, help="truncate to this many tokens (default 2048)")
    s.add_argument("--chat-template", metavar="FILE|NAME",
                   help="a Jinja file or a built-in (llama-3, chatml, deepseek, kimi) instead of the tokenizer's")
    s.add_argument("--format", choices=("auto", "messages", "sharegpt", "text"), default="auto",
                   help="row format (default: detected per file)")
    s.add_argument("--skip-bad", action="store_true", help="skip bad rows, listed in OUTPUT.skipped.jsonl")
    g = s.add_argument_group("regenerate (vLLM)")
    g.add_argument("--regenerate", action="store_true",
                   help="replace assistant turns by the model's own responses first (resumable: OUTPUT.regenerated.jsonl)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--max-new-tokens", type=int, default=512)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--batch-size", type=int, default=1024, help="rows per engine batch and side-file append (1024)")
    g.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto", help="auto: float32 on CPU "
                   "for a float32 model")
    g.add_argument("--tensor-parallel-size", type=int, default=1)
    g.add_argument("--gpu-memory-utilization", type=float, help="vLLM memory share (default 0.8 on GPUs, 0.3 on CPU)")
    g = s.add_argument_group("synthesize (vLLM; implies --regenerate)")
    g.add_argument("--synthesize", type=int, metavar="N",
                   help="add N user turns written by the model itself (Magpie), answered by it "
                        "(resumable: OUTPUT.synthesized.jsonl)")
    g.add_argument("--synthesize-max-tokens", type=int, default=256,
                   help="a user turn reaching this many tokens is dropped as overlong (default 256)")
    g.add_argument("--synthesize-temperature", type=float, default=1.0, help="default 1.0")
    g.add_argument("--synthesize-top-p", type=float, default=1.0)
    g.add_argument("--synthesize-starts", metavar="FILE|NAME", help="steer toward a workload: user turns open with "
                   "these starts (a file, one a line; built-in: code), continued by the model")
    g.add_argument("--synthesize-starts-share", type=float, metavar="F", help="the share that take a start (1.0)")

    s = cmd("extract", "token rows -> hidden-state samples (speculators' format)", extract_mod.__doc__)
    s.add_argument("--model", required=True, type=Path)
    s.add_argument("--input", required=True, type=Path, help="token JSON lines from prepare")
    s.add_argument("--output", required=True, type=Path, help="folder for data_{i}.pt and data_config.json")
    s.add_argument("--layers", help="comma-separated layer ids (default 2,N//2,N-3,N; id N = before the final norm)")
    s.add_argument("--batch-size", type=int,
                   help="prompts handed to the engine at once (default 32 with vllm, 8 with hf; 256 with "
                        "vllm-fast, whose files are written in the worker, so larger batches only keep the "
                        "GPU's steps full)")
    s.add_argument("--max-model-len", type=int, help="default: longest row + 1, rounded up to 32")
    s.add_argument("--tensor-parallel-size", type=int, default=1)
    s.add_argument("--shard", help="I/N: take token lines with index %% N == I (round-robin)")
    s.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto")
    s.add_argument("--backend", choices=("vllm", "vllm-fast", "hf"), default="vllm",
                   help="vllm: the patched speculators generator; vllm-fast: vLLM's LLM API with a worker "
                        "extension that writes files in the worker (GPU speed); hf: transformers")
    s.add_argument("--sync", choices=extract_mod.SYNC_MODES, default="end",
                   help="durability: end = one os.sync() before exit (default, counted in the rate); "
                        "each = fsync every file; none = leave write-back to the OS (resume redoes torn files)")
    s.add_argument("--site-packages", help="folder holding the patched speculators (default: found on sys.path)")
    s.add_argument("--gpu-memory-utilization", type=float, help="vLLM memory share (default 0.8 on GPUs, 0.3 on CPU)")

    s = cmd("vocab", "verifier predictions + token frequencies -> draft vocabulary (d2t.npy, t2d.npy)", vocab_mod.__doc__)
    s.add_argument("--freq", required=True, type=Path, help="TOKENS.freq.json from prepare (or speculators' token_freq.pt)")
    s.add_argument("--data", type=Path, help="extract's output: rank tokens by the verifier's top-1 predictions first")
    s.add_argument("--verifier", type=Path, help="with --data (default: the model data_config.json names)")
    s.add_argument("--target-vocab-size", type=int, help="default: the value recorded by prepare")
    s.add_argument("--draft-vocab-size", type=int,
                   help="default: the smallest multiple of 1024 holding 99%% of the verifier's greedy tokens "
                        "(with --data; else of the assistant tokens)")
    s.add_argument("--output", required=True, type=Path)

    s = cmd("train", "samples + vocab -> a trained EAGLE-3 draft (speculators' Trainer)", train_mod.__doc__)
    s.add_argument("--data", required=True, type=Path, help="extract's output folder")
    s.add_argument("--vocab", required=True, type=Path, help="vocab's output folder")
    s.add_argument("--verifier", required=True, type=Path, help="the verifier model folder")
    s.add_argument("--output", required=True, type=Path, help="checkpoint folder (the draft is OUTPUT/0)")
    s.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100; --epochs overrides)")
    s.add_argument("--epochs", type=float, help="passes over the training samples (overrides --steps)")
    s.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when a GPU is seen")
    s.add_argument("--lr", type=float, default=train_mod.DEFAULT_LR, help=f"peak learning rate (default {train_mod.DEFAULT_LR:g})")
    s.add_argument("--warmup", type=float, default=train_mod.DEFAULT_WARMUP,
                   help=f"warm-up: a share of the steps (< 1) or a number of steps (default {train_mod.DEFAULT_WARMUP:g})")
    s.add_argument("--eval-every", type=int,
                   help="held-out acceptance every N steps, the best weights saved (default: 5 times a run; 0 = off)")
    s.add_argument("--max-minutes", type=float, help="fast loop: end by this time (the schedule too), best weights kept")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--num-layers", type=int, default=1, help="draft decoder layers (default 1)")
    s.add_argument("--ttt-steps", type=int, default=3)
    s.add_argument("--ttt-step-loss-decay", type=float, default=1.0)
    s.add_argument("--max-len", type=int, default=2048, help="tokens per packed batch")
    s.add_argument("--scheduler", choices=("linear", "cosine", "none"), default="linear",
                   help="learning-rate decay after the warm-up (default linear to 0)")
    s.add_argument("--noise-std", type=float, default=0.0)
    s.add_argument("--compile", action="store_true", help="keep speculators' torch.compile on (always: fast loop, CUDA)")
    s.add_argument("--loop", choices=("auto", "fast", "speculators"), default="auto",
                   help="fast: the runner's loop around speculators' model and Trainer (worker loader, pinned "
                        "prefetch, bf16 autocast, fused AdamW); speculators: its Trainer loop as is; "
                        "auto (default): fast on CUDA, speculators on the CPU")
    s.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                   help="fast loop: bf16 autocast with float32 weights (auto on CUDA) or float32 (auto on CPU)")
    s.add_argument("--nproc", type=int, default=1, help="> 1: run under torchrun with this many processes")
    s.add_argument("--val-fraction", type=float, default=0.1,
                   help="samples held out for the acceptance evaluation (default 0.1, at most "
                        f"{train_mod.MAX_VAL_SAMPLES} samples; 0 = none)")

    s = cmd("eval", "offline acceptance per speculative position, from training's own forward", eval_mod.__doc__)
    s.add_argument("--draft", required=True, type=Path, help="train's output folder (or the draft folder OUTPUT/0)")
    s.add_argument("--data", type=Path, help="samples to score (default: the draft's held-out split)")
    s.add_argument("--verifier", type=Path, help="default: the verifier the checkpoint names")
    s.add_argument("-k", type=int, help="speculative tokens (default: the checkpoint's)")
    s.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    s.add_argument("--json", action="store_true", help="print one JSON object")

    s = cmd("serve-check", "served acceptance (and with --speed, tokens/s): vLLM serves the draft as its EAGLE-3 "
            "speculator", serve_mod.__doc__)
    cli_serve.add_arguments(s)

    s = cmd("run", "every step from a TOML config, skipping finished ones", run_mod.__doc__)
    s.add_argument("config", nargs="?", type=Path)
    s.add_argument("--example-config", action="store_true", help="print a complete, commented example config")
    s.add_argument("--tiny", action="store_true", help="build a learnable tiny Llama and chat prompts offline and run on them")
    s.add_argument("--workdir", type=Path, default=Path("runs/tiny"), help="with --tiny (default runs/tiny)")
    s.add_argument("--backend", choices=("vllm", "vllm-fast", "hf"), default="vllm", help="with --tiny: extract backend")
    s.add_argument("--steps", type=int, default=150, help="with --tiny: training steps")
    s.add_argument("--arch", default="llama", help="with --tiny: the verifier (eagle3_runner.tiny.arch, e.g. qwen3)")
    s.add_argument("--chat-template", metavar="FILE|NAME",
                   help="overrides [prepare] chat_template: a Jinja file or llama-3 | chatml | deepseek | kimi")
    s.add_argument("--force", action="store_true", help="redo every step")
    return p


def _setup_logging(verbose: bool, quiet: bool) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not verbose:
        logging.getLogger("speculators.metrics").propagate = False  # per-step metrics go to loss.jsonl
    try:  # speculators logs through loguru (file loading, ...): only its errors unless -v
        from loguru import logger as loguru_logger
    except ImportError:
        return
    loguru_logger.remove()
    loguru_logger.add(sys.stderr, level="DEBUG" if verbose else "ERROR")


def _cmd_prepare(a: argparse.Namespace) -> int:
    from .prepare import prepare
    from .prepare.regenerate import RegenerateOptions
    from .prepare.synthesize import synthesize_options

    regen = RegenerateOptions(
        temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens, seed=a.seed,
        batch_size=a.batch_size, dtype=a.dtype, tensor_parallel_size=a.tensor_parallel_size,
        gpu_memory_utilization=a.gpu_memory_utilization,
    ) if a.regenerate or a.synthesize else None
    synth = synthesize_options(vars(a), a.batch_size) if a.synthesize is not None else None
    r = prepare(a.model, a.data, a.output, a.seq_length, chat_template=a.chat_template, format=a.format,
                skip_bad=a.skip_bad, regenerate=regen, synthesize=synth)
    for i in r.inputs:
        print(f"{i.path}: {i.rows} rows ({i.format or 'no format found'}, {i.container}"
              f"{f', {i.bad} bad' if i.bad else ''})")
    if r.template:
        t = r.template
        as_text = f"; rendered as text: {' '.join(t.markers_as_text)}" if t.markers_as_text else ""
        print(f"chat template: {t.source} {t.name} (sha256 {t.sha256[:12]}{as_text})")
    if r.synthesize:
        y = r.synthesize
        print(f"synthesized: {y.counts['kept']} user turns kept of {y.attempts} samples ({y.counts['empty']} empty, "
              f"{y.counts['duplicate']} repeats, {y.counts['overlong']} overlong dropped; {y.generated} drawn now, "
              f"{y.tokens} tokens in {y.seconds:.1f} s; {y.side_file})")
    if r.regenerate:
        g = r.regenerate
        print(f"regenerated: {g.regenerated} rows now, {g.reused} from {g.side_file}; {g.turns} turns, {g.tokens} tokens "
              f"({g.truncated} hit --max-new-tokens, {g.retokenized_differs} re-encode differently, "
              f"{g.dropped_turns} dropped for length)")
    print(f"{r.output}: {r.rows} rows, {r.tokens} tokens, {r.masked_tokens} in the loss "
          f"({r.truncated} truncated; mask by {r.mask_method})")
    if r.skipped_report:
        print(f"{r.skipped_report}: {r.skipped} bad rows skipped")
    print(f"{r.freq}: token frequencies; {r.record}: what made them")
    return ExitCode.OK


def _cmd_extract(a: argparse.Namespace) -> int:
    from .extract import ExtractOptions, extract, parse_shard

    r = extract(ExtractOptions(
        model=a.model, input=a.input, output=a.output, layers=a.layers, batch_size=a.batch_size,
        max_model_len=a.max_model_len, tensor_parallel_size=a.tensor_parallel_size, shard=parse_shard(a.shard),
        dtype=a.dtype, backend=a.backend, site_packages=a.site_packages,
        gpu_memory_utilization=a.gpu_memory_utilization, sync=a.sync,
    ))
    rate = f", {r.written / r.seconds:.1f} samples/s, {r.tokens / r.seconds:,.0f} tokens/s" if r.seconds else ""
    print(f"{r.output}: {r.written} written, {r.skipped} already done, {len(r.bad)} bad of {r.total} "
          f"(layer ids {r.layer_ids}{rate})")
    if r.bad:
        for index, problems in r.bad:
            print(f"  line {index + 1} (data_{index}.pt): {'; '.join(problems)}", file=sys.stderr)
        return ExitCode.BAD_SAMPLES
    return ExitCode.OK


def _cmd_vocab(a: argparse.Namespace) -> int:
    from .train.vocab import build_vocab

    r = build_vocab(a.freq, a.target_vocab_size, a.draft_vocab_size, a.output, data=a.data, verifier=a.verifier)
    top1 = "" if r.verifier_top1_coverage is None else \
        f", {100 * r.verifier_top1_coverage:.1f}% of the verifier's greedy predictions"
    print(f"{r.output}: d2t.npy, t2d.npy ({r.draft_vocab_size} of {r.target_vocab_size} tokens, "
          f"{100 * r.coverage:.1f}% of assistant tokens covered{top1}; {r.implementation})")
    return ExitCode.OK


def _cmd_eval(a: argparse.Namespace) -> int:
    import json

    from .evaluate import evaluate

    r = evaluate(a.draft, a.data, a.verifier, a.k, a.device).to_dict()
    if a.json:
        print(json.dumps(r))
        return ExitCode.OK
    print(f"{r['draft']} on {r['samples']} samples (verifier {r['verifier']}, k={r['k']}; "
          f"{100 * r['vocab_coverage']:.1f}% of the verifier's greedy tokens are in the draft vocabulary):")
    print(acceptance_table({"walk": r, "all starts": r["all_positions"]}))
    return ExitCode.OK


def _print_losses(checkpoint: Path, losses: list[float]) -> None:
    from .common.plot import loss_plot, loss_table

    print(f"checkpoint: {checkpoint}")
    if losses:
        print(f"training loss ({len(losses)} steps, {losses[0]:.4f} -> {losses[-1]:.4f}):")
        print(loss_plot(losses))
        print(loss_table(losses))


def _cmd_train(a: argparse.Namespace) -> int:
    from .train import TrainOptions, read_losses, train

    opts = TrainOptions(
        data=a.data, vocab=a.vocab, verifier=a.verifier, output=a.output, steps=a.steps, device=a.device, lr=a.lr,
        seed=a.seed, num_layers=a.num_layers, ttt_steps=a.ttt_steps, ttt_step_loss_decay=a.ttt_step_loss_decay,
        max_len=a.max_len, scheduler=a.scheduler, noise_std=a.noise_std, compile=a.compile, loop=a.loop,
        precision=a.precision, val_fraction=a.val_fraction, epochs=a.epochs, warmup=a.warmup, eval_every=a.eval_every,
        max_minutes=a.max_minutes,
    )
    if a.nproc > 1 and "LOCAL_RANK" not in os.environ:
        from .train.launch import torchrun_train

        torchrun_train(opts, a.nproc)
        _print_losses(a.output / "0", read_losses(a.output))
        return ExitCode.OK
    r = train(opts)
    from .train.launch import LAUNCHED

    if int(os.environ.get("RANK", "0")) == 0 and LAUNCHED not in os.environ:
        _print_losses(r.checkpoint, r.losses)
    return ExitCode.OK


def _cmd_run(a: argparse.Namespace) -> int:
    from .run import acceptance_problem, example_config, load_config, run_pipeline, tiny_config

    if a.example_config:
        print(example_config(), end="")
        return ExitCode.OK
    if a.tiny:
        cfg = tiny_config(a.workdir, backend=a.backend, steps=a.steps, arch=a.arch)
    elif a.config:
        cfg = load_config(a.config)
    else:
        print("eagle3 run: give CONFIG.toml, --tiny or --example-config", file=sys.stderr)
        return ExitCode.USAGE
    if a.chat_template:  # a file named on the command line is relative to the cwd, not the config
        template = Path(a.chat_template)
        cfg.prepare["chat_template"] = str(template.resolve()) if template.is_file() else a.chat_template
    r = run_pipeline(cfg, force=a.force)
    if r.extract:
        e = r.extract
        print(f"extract: {e.written} samples written, {e.skipped} already done ({e.output})")
    if r.skipped:
        print(f"skipped (already complete): {', '.join(r.skipped)}")
    _print_losses(r.checkpoint, r.losses)
    if r.offline:
        columns = {"offline": r.offline, **({"served": r.served} if r.served else {})}
        print(f"acceptance on the {r.offline['samples']} held-out samples, k={r.offline['k']} "
              f"(offline: eagle3 eval; served: vLLM's spec-decode counters, eagle3 serve-check):")
        print(acceptance_table(columns))
    problem = acceptance_problem(cfg, r)
    if problem:
        print(f"eagle3 run: error: {problem}", file=sys.stderr)
        return ExitCode.MISMATCH
    return ExitCode.OK


COMMANDS = {"prepare": _cmd_prepare, "extract": _cmd_extract, "vocab": _cmd_vocab, "train": _cmd_train,
            "eval": _cmd_eval, "serve-check": cmd_serve_check, "run": _cmd_run}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _setup_logging(args.verbose, args.quiet)
    import os

    from .train.launch import NO_MULTICAST

    for name, value in NO_MULTICAST.items():  # inherited by vLLM's workers and torchrun's ranks
        os.environ.setdefault(name, value)
    try:
        return int(COMMANDS[args.command](args))
    except RunnerError as exc:
        print(f"eagle3 {args.command}: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(exc.hint, file=sys.stderr)
        return int(exc.code)
    except KeyboardInterrupt:
        print(f"eagle3 {args.command}: interrupted (re-run to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
