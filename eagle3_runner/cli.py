"""``eagle3``: the command line (parsing, printing, exit codes). Library modules never print."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .cli_serve import acceptance_table, cmd_serve_check, speed_table
from .common.errors import EXIT_CODES_HELP, ExitCode, RunnerError, UsageError

DESCRIPTION = "From chat data to a trained EAGLE-3 draft on the (vllm-compat patched) speculators stack."


class _RaisingParser(argparse.ArgumentParser):
    """Under ``--json``: a bad command line raises, so that it too is reported as JSON."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _parser(json_errors: bool = False) -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    cls = _RaisingParser if json_errors else argparse.ArgumentParser
    p = cls(prog="eagle3", description=DESCRIPTION, epilog=EXIT_CODES_HELP, formatter_class=fmt)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=cls)

    def cmd(name: str, help: str, doc: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=doc or help, epilog=EXIT_CODES_HELP, formatter_class=fmt)

    from . import evaluate as eval_mod
    from . import extract as extract_mod
    from . import prepare as prepare_mod
    from . import cli_serve
    from .evaluate import serve_check as serve_mod
    from . import run as run_mod
    from . import train as train_mod
    from .config.flags import add_command_flags, add_flag
    from .config.keys import key
    from .train import vocab as vocab_mod
    from .run import TINY_STEPS

    s = cmd("prepare", "chat or text rows -> token rows with a loss mask", prepare_mod.__doc__)
    s.add_argument("--model", required=True, type=Path, help="model folder (its tokenizer, and its chat template by default)")
    s.add_argument("--output", required=True, type=Path, help="token JSON lines (side files go next to it)")
    add_command_flags(s, "prepare")

    s = cmd("extract", "token rows -> hidden-state samples (speculators' format)", extract_mod.__doc__)
    s.add_argument("--model", required=True, type=Path)
    s.add_argument("--input", required=True, type=Path, help="token JSON lines from prepare")
    s.add_argument("--output", required=True, type=Path, help="folder for data_{i}.pt and data_config.json")
    add_command_flags(s, "extract")

    s = cmd("vocab", "verifier predictions + token frequencies -> draft vocabulary (d2t.npy, t2d.npy)", vocab_mod.__doc__)
    s.add_argument("--freq", required=True, type=Path, help="TOKENS.freq.json from prepare (or speculators' token_freq.pt)")
    s.add_argument("--data", type=Path, help="extract's output: rank tokens by the verifier's top-1 predictions first")
    s.add_argument("--verifier", type=Path, help="with --data (default: the model data_config.json names)")
    add_command_flags(s, "vocab")
    s.add_argument("--output", required=True, type=Path)

    s = cmd("train", "samples + vocab -> a trained EAGLE-3 draft (speculators' Trainer)", train_mod.__doc__)
    s.add_argument("--data", required=True, type=Path, help="extract's output folder")
    s.add_argument("--vocab", required=True, type=Path, help="vocab's output folder")
    s.add_argument("--verifier", required=True, type=Path, help="the verifier model folder")
    s.add_argument("--output", required=True, type=Path, help="checkpoint folder (the draft is OUTPUT/0)")
    add_command_flags(s, "train")

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
    add_flag(s, key("extract", "backend"), help="with --tiny: the extract backend (default vllm)")
    add_flag(s, key("train", "steps"), default=TINY_STEPS, help=f"with --tiny: training steps (default {TINY_STEPS})")
    s.add_argument("--arch", default="llama", help="with --tiny: the verifier (eagle3_runner.tiny.arch, e.g. qwen3)")
    add_flag(s, key("prepare", "chat_template"), metavar="FILE|NAME",
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
    from .common.formats import counted
    from .prepare import prepare
    from .prepare.regenerate import RegenerateOptions
    from .prepare.synthesize import synthesize_options

    regen = RegenerateOptions(
        temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens, seed=a.seed,
        batch_size=a.regenerate_batch_size, dtype=a.dtype, tensor_parallel_size=a.tensor_parallel_size,
        gpu_memory_utilization=a.gpu_memory_utilization,
    ) if a.regenerate or a.synthesize else None
    synth = synthesize_options(vars(a), a.regenerate_batch_size) if a.synthesize is not None else None
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
        print(f"{r.skipped_report}: {counted(r.skipped, 'bad rows')} skipped")
    print(f"{r.freq}: token frequencies; {r.record}: what made them")
    return ExitCode.OK


def _cmd_extract(a: argparse.Namespace) -> int:
    from .config.flags import flag_values
    from .extract import ExtractOptions, extract, parse_shard

    r = extract(ExtractOptions(model=a.model, input=a.input, output=a.output,
                               **{**flag_values(a, "extract"), "shard": parse_shard(a.shard)}))
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
        print(json.dumps({"exit_code": 0, "result": "ok", **r}))
        return ExitCode.OK
    print(f"{r['draft']} on {r['samples']} samples (verifier {r['verifier']}, k={r['k']}; "
          f"{100 * r['vocab_coverage']:.1f}% of the verifier's greedy tokens are in the draft vocabulary):")
    print(acceptance_table({"walk": r, "all starts": r["all_positions"]}))
    return ExitCode.OK


def _print_losses(checkpoint: Path, losses: list[float]) -> None:
    from .common.plot import loss_plot, loss_table
    from .common.formats import LOSS_LOG

    print(f"checkpoint: {checkpoint}")
    if losses:
        print(f"training loss ({len(losses)} steps, {losses[0]:.4f} -> {losses[-1]:.4f}; every step in "
              f"{checkpoint.parent / LOSS_LOG}):")
        print(loss_plot(losses))
        print(loss_table(losses))


def _cmd_train(a: argparse.Namespace) -> int:
    from .config.flags import flag_values
    from .train import TrainOptions, read_losses, train

    opts = TrainOptions(data=a.data, vocab=a.vocab, verifier=a.verifier, output=a.output,
                        **flag_values(a, "train", leave=("nproc",)))
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
    from .run import example_config

    if a.example_config:
        print(example_config(), end="")
        return ExitCode.OK
    if not (a.tiny or a.config):
        print("eagle3 run: give CONFIG.toml, --tiny or --example-config", file=sys.stderr)
        return ExitCode.USAGE
    from contextlib import nullcontext

    from .common.console import quiet_terminal

    # quiet: each step's output in WORK/logs/STEP.log; the plan, bars, milestones and summary here
    with nullcontext() if a.verbose else quiet_terminal():
        return _run_and_report(a)


def _run_and_report(a: argparse.Namespace) -> int:
    from .common.console import quiet
    from .run import LOGS, STEPS, acceptance_problem, load_config, plan, run_pipeline, tiny_config

    cfg = None if a.tiny else load_config(a.config)
    steps, workdir = (["tiny_verifier", *STEPS], a.workdir.absolute()) if cfg is None else (plan(cfg), cfg.workdir)
    print(f"eagle3 run: {' -> '.join(s.replace('_', '-') for s in steps)} in {workdir}"
          + (f"\n  each step's output goes to {workdir / LOGS}/STEP.log (-v shows it here)" if quiet() else ""),
          flush=True)
    if cfg is None:
        cfg = tiny_config(a.workdir, backend=a.backend, steps=a.steps, arch=a.arch)
    if a.chat_template:  # a file named on the command line is relative to the cwd, not the config
        template = Path(a.chat_template)
        cfg.prepare["chat_template"] = str(template.resolve()) if template.is_file() else a.chat_template
    r = run_pipeline(cfg, force=a.force)
    if r.skipped:
        print(f"skipped (already complete): {', '.join(r.skipped)}")
    _print_losses(r.checkpoint, r.losses)
    if r.offline:
        columns = {"offline": r.offline, **({"served": r.served} if r.served else {})}
        print(f"acceptance on the {r.offline['samples']} held-out samples, k={r.offline['k']} "
              f"(offline: eagle3 eval; served: vLLM's spec-decode counters, eagle3 serve-check):")
        print(acceptance_table(columns))
    if r.served and r.served.get("speed"):
        print(speed_table(r.served["speed"]))
    problem = acceptance_problem(cfg, r)
    if problem:
        print(f"eagle3 run: error: {problem}", file=sys.stderr)
        return ExitCode.MISMATCH
    return ExitCode.OK


COMMANDS = {"prepare": _cmd_prepare, "extract": _cmd_extract, "vocab": _cmd_vocab, "train": _cmd_train,
            "eval": _cmd_eval, "serve-check": cmd_serve_check, "run": _cmd_run}


# The model folder each command takes, and whether it must hold a tokenizer (``run``: its config's).
MODEL_ARGS = {"prepare": ("model", True), "extract": ("model", True), "vocab": ("verifier", False),
              "train": ("verifier", False), "eval": ("verifier", False), "serve-check": ("verifier", True)}


def _report_error(command: str, exc: RunnerError, as_json: bool) -> int:
    """One line on stderr (and the hint), or under ``--json`` one JSON object on stdout."""
    if as_json:
        import json

        print(json.dumps({"exit_code": int(exc.code), "result": exc.code.name.lower(), "error": str(exc),
                          **({"hint": exc.hint} if exc.hint else {})}))
        return int(exc.code)
    print(f"eagle3 {command}: error: {exc}", file=sys.stderr)
    if exc.hint:
        print(exc.hint, file=sys.stderr)
    return int(exc.code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        args = _parser(json_errors=as_json).parse_args(argv)
    except UsageError as exc:  # only under --json; else argparse prints and exits 2
        return _report_error(next((w for w in argv if w in COMMANDS), ""), exc, as_json)
    _setup_logging(args.verbose, args.quiet)
    from .common.environment import cpu_engine_defaults
    from .train.launch import NO_MULTICAST

    # inherited by vLLM's workers and torchrun's ranks; a value the user set wins
    for name, value in {**NO_MULTICAST, **cpu_engine_defaults()}.items():
        os.environ.setdefault(name, value)
    try:
        folder, tokenizer = MODEL_ARGS.get(args.command, ("", False))
        if getattr(args, folder, None) is not None:
            from .common.model_folder import check_model_folder

            check_model_folder(getattr(args, folder), tokenizer=tokenizer, what=folder)
        return int(COMMANDS[args.command](args))
    except RunnerError as exc:
        return _report_error(args.command, exc, getattr(args, "json", False))
    except KeyboardInterrupt:
        print(f"eagle3 {args.command}: interrupted (re-run to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
