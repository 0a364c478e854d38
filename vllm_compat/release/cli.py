"""The CLI side of the release-day commands: ``check --against`` and ``prove`` (rendering and
exit codes; the work is in :mod:`.against` and :mod:`.prove`)."""

from __future__ import annotations

import argparse
import json

from ..report import Exit
from ..target import Target


def run_against(target: Target, args: argparse.Namespace) -> int:
    from .against import check_against  # noqa: PLC0415

    report = check_against(target, args.against, args.wheel)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
        return int(report.code)
    print(f"installed site: {report.site} (not written)")
    print("checked against: " + ", ".join(f"{pkg} {ver}" for pkg, ver in sorted(report.versions.items())))
    for pkg, whl in sorted(report.wheels.items()):
        print(f"  {pkg}: {whl}")
    print("proven range: " + ("inside" if report.in_range else "OUTSIDE: " + "; ".join(report.unsupported)))
    width = max((len(p.id) for p in report.patches), default=5)
    print()
    for p in report.patches:
        if p.state == "not-applicable" and not args.verbose:
            continue
        print(f"{p.id.ljust(width)}  {p.state}" + (f"  {p.detail}" if p.detail else ""))
        for f in p.findings:
            print(f"    {f}")
    hidden = sum(p.state == "not-applicable" for p in report.patches)
    if hidden and not args.verbose:
        print(f"({hidden} patch(es) not applicable to these versions: -v lists them)")
    for f in report.other_findings:
        print(f"unpatched file: {f}")
    for n in report.notes:
        print(f"note: {n}")
    for m in report.advisories:
        print(f"advisory {m.advisory.id}: {m.advisory.title}\n  why: {m.advisory.why}\n  fix: {m.advisory.fix}")
    print(f"\nchecked {report.files_checked} file(s), {report.calls_checked} vLLM call(s); "
          f"result: {report.code.name.lower()} (exit {int(report.code)})")
    return int(report.code)


def run_prove(target: Target, args: argparse.Namespace) -> int:
    from .prove import prove  # noqa: PLC0415

    result = prove(target, True if args.server else None, args.connector, tuple(args.arch))
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return int(result.code)
    print(f"site-packages: {target.site} ({result.method} path)")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(result.versions.items())))
    for arch, r in result.results.items():
        if r["status"] == "skipped":
            print(f"  {arch}: skipped ({r['reason']})")
        else:
            print(f"  {arch}: {r['status']}: worst rel. error {r['worst']:.3g} (tolerance {r['tolerance']:g}), "
                  f"{r['cases']} case(s), {r['seconds']:.1f} s" + (f": {r['reason']}" if r.get("reason") else ""))
    if result.code == Exit.OK and result.path:
        print(f"proof recorded in {result.path} ({result.date}, {len(result.files)} patched file(s) bound)")
    print(f"result: {result.code.name.lower()} (exit {int(result.code)}, {result.seconds:.0f} s)")
    return int(result.code)
