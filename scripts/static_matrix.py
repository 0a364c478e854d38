#!/usr/bin/env python3
"""The static matrix: speculators {0.3.0, 0.4.0, 0.4.0.1} x every vLLM minor release 0.11.0 .. 0.34.0.

For each cell it builds a throw-away site-packages from the real wheels (speculators unpacked,
vLLM's Python sources and dist-info; see ``tests/upstream.py``, which caches the wheels), runs
``python -m vllm_compat apply --site-packages SITE --allow-unsupported``, ``compile()``s every
managed file, and runs the static check (:func:`vllm_compat.check.check_sources`) on the
speculators files that touch vLLM, the files the engine manages, and any vendored
``speculators/_vllm_compat*.py`` shim, against that site's vLLM sources.

Writes ``static-findings.md`` (a table: rows vLLM, columns speculators; "clean" or the number
of findings, then every finding) and ``static-findings.json`` (every finding) to ``--out DIR``.
Exit status: 0 when every selected cell is clean, 1 otherwise, 2 on a usage error.

    python scripts/static_matrix.py --out .cache                 # all 78 cells
    python scripts/static_matrix.py --out /tmp/m --cells 0.32.0,0.3.0@0.33.0 --jobs 2
    python scripts/static_matrix.py --out /tmp/m --no-apply      # the unpatched files
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import upstream  # noqa: E402  (tests/upstream.py: wheel cache and site builder)
from vllm_compat.check import check_sources  # noqa: E402

SPECULATORS = ("0.3.0", "0.4.0", "0.4.0.1")
VLLM = ("0.11.0", "0.11.1", "0.11.2") + tuple(f"0.{m}.0" for m in range(12, 35))

# The speculators files that use vLLM; always checked, patched or not.
BASE_FILES = (
    "speculators/data_generation/vllm_hidden_states_generator.py",
    "speculators/data_generation/custom_worker.py",
)
SHIM_GLOB = "_vllm_compat*.py"
APPLY_TIMEOUT = 600  # seconds; a hung apply fails its cell instead of the whole run


def engine_available(python: str) -> bool:
    """Is the engine's CLI (``python -m vllm_compat apply``) there to run?"""
    if not (REPO / "vllm_compat" / "__main__.py").is_file():
        return False
    probe = subprocess.run([python, "-m", "vllm_compat", "apply", "--help"], cwd=REPO,
                           env=_env(), capture_output=True, text=True)
    return probe.returncode == 0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    return env


def managed_files(site: Path) -> list[str]:
    """Site-relative paths to check: the base files, the manifest's files, vendored shims."""
    rels = dict.fromkeys(BASE_FILES)
    manifest = site / ".vllm_compat" / "manifest.json"
    if manifest.is_file():
        for rel in json.loads(manifest.read_text()).get("files", {}):
            if rel.endswith(".py"):
                rels.setdefault(rel)
    for p in sorted((site / "speculators").glob(SHIM_GLOB)):
        rels.setdefault(p.relative_to(site).as_posix())
    return [r for r in rels if (site / r).is_file()]


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def build_site(site: Path, spec: str, vllm: str) -> Path:
    """``upstream.build_site``, but the vLLM sources are hard links into the cached tree
    (the engine only writes speculators files, and writes them by atomic replace)."""
    upstream.unpack(upstream.wheel("speculators", spec), site)
    tree = upstream.source_tree(upstream.vllm_wheel(vllm))
    shutil.copytree(tree, site, dirs_exist_ok=True, copy_function=_link_or_copy,
                    ignore=shutil.ignore_patterns(".complete"))
    return site


def run_cell(spec: str, vllm: str, apply: bool, python: str, keep: Path | None) -> dict:
    """One cell, in a fresh site; returns a JSON-able record."""
    t0 = time.monotonic()
    rec: dict = {"speculators": spec, "vllm": vllm, "applied": apply, "findings": []}
    sites = upstream.CACHE / "matrix-sites"  # next to the cached trees, so links work
    sites.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{spec}-{vllm}-", dir=sites))
    site = tmp / "site-packages"
    try:
        build_site(site, spec, vllm)
        rec["vllm_dist"] = next((p.name for p in site.glob("vllm*.dist-info")), "")
        if apply:
            proc = subprocess.run(
                [python, "-m", "vllm_compat", "apply", "--site-packages", str(site),
                 "--allow-unsupported"],
                cwd=REPO, env=_env(), capture_output=True, text=True, timeout=APPLY_TIMEOUT)
            rec["apply_rc"] = proc.returncode
            rec["apply_output"] = (proc.stdout + proc.stderr)[-4000:]
            if proc.returncode != 0:
                rec["findings"].append({
                    "file": "", "line": 0, "kind": "apply-failed",
                    "message": f"vllm-compat apply exited {proc.returncode}: "
                               + (proc.stdout + proc.stderr).strip()[-1500:]})
        rels = managed_files(site)
        rec["files"] = rels
        sources: dict[str, str] = {}
        for rel in rels:
            text = (site / rel).read_text()
            try:
                compile(text, rel, "exec")
            except SyntaxError as exc:
                rec["findings"].append({"file": rel, "line": exc.lineno or 0,
                                        "kind": "compile-error", "message": str(exc.msg)})
                continue
            sources[rel] = text
        report = check_sources(sources, site)
        rec["findings"] += [vars(f) for f in report.findings]
        if report.calls_checked == 0:  # a pass that proved nothing is no pass
            rec["findings"].append({"file": "", "line": 0, "kind": "vacuous-check",
                                    "message": "no vLLM call was bound in "
                                               f"{len(sources)} file(s)"})
        rec["calls_checked"] = report.calls_checked
        rec["calls_skipped"] = report.calls_skipped
        rec["files_checked"] = report.files_checked
    except Exception as exc:  # noqa: BLE001 - a broken cell must not hide the others
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if keep is not None:
            dest = keep / f"{spec}-{vllm}"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.move(str(site), dest)
        shutil.rmtree(tmp, ignore_errors=True)
    rec["seconds"] = round(time.monotonic() - t0, 2)
    rec["clean"] = not rec["findings"] and "error" not in rec
    return rec


def run_group(vllm: str, specs: list[str], apply: bool, python: str,
              keep: Path | None) -> list[dict]:
    """The cells of one vLLM version, in one process (they share the parsed vLLM modules)."""
    return [run_cell(s, vllm, apply, python, keep) for s in specs]


def select(cells_arg: str | None) -> list[tuple[str, str]]:
    """``--cells``: comma-separated ``SPEC@VLLM`` (wildcards allowed) or a bare vLLM version."""
    all_cells = [(s, v) for v in VLLM for s in SPECULATORS]
    if not cells_arg:
        return all_cells
    chosen: list[tuple[str, str]] = []
    for item in (x.strip() for x in cells_arg.split(",") if x.strip()):
        spec_pat, _, vllm_pat = item.rpartition("@") if "@" in item else ("*", "", item)
        match = [c for c in all_cells
                 if fnmatch.fnmatch(c[0], spec_pat) and fnmatch.fnmatch(c[1], vllm_pat)]
        if not match:
            raise SystemExit(f"--cells: {item!r} matches no cell "
                             f"(speculators {SPECULATORS}, vLLM {VLLM[0]}..{VLLM[-1]})")
        chosen += [c for c in match if c not in chosen]
    return chosen


def cell_text(rec: dict | None) -> str:
    if rec is None:
        return ""
    if "error" in rec:
        return "error"
    return "clean" if rec["clean"] else str(len(rec["findings"]))


def render(records: list[dict], applied: bool, seconds: float) -> str:
    by = {(r["speculators"], r["vllm"]): r for r in records}
    specs = [s for s in SPECULATORS if any(r["speculators"] == s for r in records)]
    vllms = [v for v in VLLM if any(r["vllm"] == v for r in records)]
    clean = sum(r["clean"] for r in records)
    lines = ["# Static matrix", ""]
    if not applied:
        lines += ["**Ran WITHOUT `vllm-compat apply`: these are the unpatched speculators "
                  "files.**", ""]
    calls = [r["calls_checked"] for r in records if "calls_checked" in r]
    lines += [f"{clean}/{len(records)} cells clean; {seconds:.0f} s."
              + (f" vLLM calls bound per cell: {min(calls)}-{max(calls)}." if calls else ""),
              "",
              "| vLLM | " + " | ".join(f"speculators {s}" for s in specs) + " |",
              "|---|" + "---|" * len(specs)]
    for v in vllms:
        lines.append(f"| {v} | " + " | ".join(cell_text(by.get((s, v))) for s in specs) + " |")
    lines += ["", "Cells: `clean`, or the number of findings (import, call, attribute, "
              "compile or apply problems); `error`: the cell could not be built.", ""]
    for r in sorted(records, key=lambda r: (VLLM.index(r["vllm"]),
                                            SPECULATORS.index(r["speculators"]))):
        if r["clean"]:
            continue
        lines.append(f"## speculators {r['speculators']} x vLLM {r['vllm']}")
        lines.append("")
        if "error" in r:
            lines.append(f"- error: {r['error']}")
        for f in r["findings"]:
            where = f"{f['file']}:{f['line']}" if f["file"] else "(cell)"
            lines.append(f"- `{where}` {f['kind']}: {f['message']}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="folder for the .md and .json")
    p.add_argument("--jobs", type=int, default=1, help="parallel processes (default 1)")
    p.add_argument("--cells", help="subset: comma-separated SPEC@VLLM (wildcards) or VLLM")
    p.add_argument("--no-apply", action="store_true", help="check the unpatched files")
    p.add_argument("--python", default=None,
                   help="interpreter that runs the engine (default: .venv/bin/python if it "
                        "exists, else this one)")
    p.add_argument("--keep", type=Path, help="keep each cell's site-packages under this folder")
    args = p.parse_args(argv)

    cells = select(args.cells)
    python = args.python or (str(REPO / ".venv/bin/python")
                             if (REPO / ".venv/bin/python").exists() else sys.executable)
    apply = not args.no_apply
    if apply and not engine_available(python):
        print("static-matrix: the engine CLI (python -m vllm_compat apply) is not available: "
              "running WITHOUT apply, on the unpatched files", file=sys.stderr)
        apply = False
    elif not apply:
        print("static-matrix: --no-apply: running WITHOUT apply, on the unpatched files",
              file=sys.stderr)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)

    groups: dict[str, list[str]] = {}
    for s, v in cells:
        groups.setdefault(v, []).append(s)
    t0 = time.monotonic()
    records: list[dict] = []
    jobs = max(1, args.jobs)
    if jobs == 1:
        for v, specs in groups.items():
            for rec in run_group(v, specs, apply, python, args.keep):
                records.append(rec)
                _progress(rec)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futs = [pool.submit(run_group, v, specs, apply, python, args.keep)
                    for v, specs in groups.items()]
            for fut in as_completed(futs):
                for rec in fut.result():
                    records.append(rec)
                    _progress(rec)
    seconds = time.monotonic() - t0

    records.sort(key=lambda r: (VLLM.index(r["vllm"]), SPECULATORS.index(r["speculators"])))
    args.out.mkdir(parents=True, exist_ok=True)
    md = render(records, apply, seconds)
    (args.out / "static-findings.md").write_text(md + "\n")
    (args.out / "static-findings.json").write_text(json.dumps(
        {"applied": apply, "seconds": round(seconds, 1), "when": time.strftime("%Y-%m-%d", time.gmtime()),
         "clean": sum(r["clean"] for r in records), "cells": records}, indent=1) + "\n")
    print(md.split("\n\n## ")[0])
    print(f"\nwrote {args.out / 'static-findings.md'} and {args.out / 'static-findings.json'}")
    if not apply:
        print("NOTE: ran WITHOUT apply (unpatched files)")
    return 0 if all(r["clean"] for r in records) else 1


def _progress(rec: dict) -> None:
    status = rec.get("error") or ("clean" if rec["clean"] else f"{len(rec['findings'])} finding(s)")
    print(f"  speculators {rec['speculators']} x vLLM {rec['vllm']}: {status} "
          f"({rec.get('calls_checked', 0)} calls checked, {rec['seconds']} s)",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
