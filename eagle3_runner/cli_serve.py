"""``eagle3 serve-check``'s arguments and output, and the acceptance and speed tables ``eval`` and ``run``
print too (the CLI layer: library modules never print)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .common.errors import ExitCode
from .config.flags import add_command_flags
from .evaluate import serve_check as serve_mod
from .evaluate import speed as speed_mod


def batch_sizes(text: str) -> list[int]:
    """``--batch-sizes 1,8``: positive integers, comma-separated."""
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas (e.g. 1,8), got {text!r}")
    return sizes


def repeats(text: str) -> int:
    """``--repeats``: at least 2 (the median of the runs is reported)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 (the median of the runs is reported), got {text!r}")
    return n


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--draft", required=True, type=Path, help="train's output folder (or the draft folder OUTPUT/0)")
    s.add_argument("--verifier", type=Path, help="default: the verifier the checkpoint names")
    s.add_argument("--prompts", type=Path, help="JSON list of prompts or token rows (default: the held-out turns)")
    s.add_argument("-k", type=int, default=3, help="num_speculative_tokens (default 3)")
    s.add_argument("--max-tokens", type=int, help=f"per prompt (default: for token rows, the turn's length - k + 1; "
                                                  f"else {serve_mod.DEFAULT_MAX_TOKENS})")
    add_command_flags(s, "serve-check")  # --dtype: [serve_check] dtype
    s.add_argument("--no-reference", action="store_true", help="skip the run without the draft (output equality)")
    s.add_argument("--prefix-caching", choices=("auto", "on", "off"), default="auto", help="vLLM's prefix caching "
                   "(auto: vLLM's default; off for a hybrid verifier on a vLLM without Triton: docs/eagle3.md)")
    s.add_argument("--speed", action="store_true", help="also time serving with and without the draft (tokens/s, "
                   "the speed-up; CUDA graphs on a GPU, a CPU figure on the CPU)")
    s.add_argument("--batch-sizes", type=batch_sizes, default=list(speed_mod.DEFAULT_BATCHES),
                   help="--speed: requests in flight, comma-separated (default 1,8)")
    s.add_argument("--repeats", type=repeats, default=speed_mod.DEFAULT_REPEATS,
                   help=f"--speed: timed runs per batch size, the median reported (default {speed_mod.DEFAULT_REPEATS})")
    s.add_argument("--speed-prompts", type=int, default=speed_mod.DEFAULT_PROMPTS,
                   help=f"--speed: how many of the prompts to time (default {speed_mod.DEFAULT_PROMPTS})")
    s.add_argument("--speed-max-tokens", type=int, default=speed_mod.DEFAULT_MAX_TOKENS,
                   help=f"--speed: at most this many tokens per prompt, else the verifier's own stop "
                        f"(default {speed_mod.DEFAULT_MAX_TOKENS})")
    s.add_argument("--json", action="store_true", help="print one JSON object")


def acceptance_table(columns: dict[str, dict]) -> str:
    """Per-position acceptance of several sources side by side (each a dict with
    ``acceptance_per_position``, ``mean_acceptance_length`` and ``drafts``)."""
    names = list(columns)
    k = max(len(c["acceptance_per_position"]) for c in columns.values())
    lines = ["position  " + "  ".join(f"{n:>10}" for n in names)]
    for j in range(k):
        cells = [c["acceptance_per_position"][j] if j < len(c["acceptance_per_position"]) else float("nan")
                 for c in columns.values()]
        lines.append(f"{j + 1:>8}  " + "  ".join(f"{100 * v:>9.1f}%" for v in cells))
    lines.append("mean len  " + "  ".join(f"{c['mean_acceptance_length']:>10.2f}" for c in columns.values()))
    lines.append("drafts    " + "  ".join(f"{c['drafts']:>10}" for c in columns.values()))
    return "\n".join(lines)


def speed_table(speed: dict[str, Any]) -> str:
    """``serve-check --speed``'s result: a row per batch size, then the verdict."""
    def num(v: float | None, fmt: str) -> str:
        return format(v, fmt) if v is not None else "-"

    lines = [f"serving speed, k={speed['k']}, {speed['prompts']} prompts, at most {speed['max_tokens']} tokens each, "
             f"median of {min((r['repeats'] for r in speed['batches'].values()), default=0)} runs:",
             "batch  verifier tok/s  with draft tok/s  speed-up  accept len  ms/step verifier  ms/step with draft"]
    for b, r in speed["batches"].items():
        lines.append(f"{b:>5}  {num(r['tokens_per_s_verifier'], ',.0f'):>14}  {num(r['tokens_per_s_with_draft'], ',.0f'):>16}"
                     f"  {num(r['speedup'], '.2f'):>7}x  {num(r['mean_acceptance_length'], '.2f'):>10}"
                     f"  {num(r['ms_per_step_verifier'], '.2f'):>16}  {num(r['ms_per_step_with_draft'], '.2f'):>18}")
    lines.append(speed["verdict"])
    if speed.get("note"):
        lines.append(speed["note"])
    return "\n".join(lines)


def cmd_serve_check(a: argparse.Namespace) -> int:
    speed = {"max_tokens": a.speed_max_tokens, "batches": a.batch_sizes, "repeats": a.repeats,
             "n_prompts": a.speed_prompts} if a.speed else None
    r = serve_mod.check_draft(a.draft, a.verifier, a.prompts, a.k, a.max_tokens, a.dtype, reference=not a.no_reference,
                              prefix_caching={"auto": None, "on": True, "off": False}[a.prefix_caching], speed=speed)
    r.pop("outputs", None)
    code = ExitCode.MISMATCH if r.get("outputs_equal_reference") is False else ExitCode.OK
    if a.json:
        differ = {"error": f"vLLM's output with the draft differs from the verifier's without it (prompts "
                           f"{r['outputs_differing'][:20]})"} if code else {}
        print(json.dumps({"exit_code": int(code), "result": code.name.lower(), **differ, **r}))
    else:
        print(f"vLLM served {r['prompts']} prompts ({r['generated_tokens']} tokens) with the draft, k={a.k}: "
              f"acceptance rate {100 * r['acceptance_rate']:.1f}%")
        print(acceptance_table({"served": r}))
        if "outputs_equal_reference" in r:
            print("outputs equal the verifier's without the draft" if r["outputs_equal_reference"] else
                  f"OUTPUTS DIFFER from the verifier's without the draft: prompts {r['outputs_differing'][:20]}")
        if "speed" in r:
            print(speed_table(r["speed"]))
    return code
