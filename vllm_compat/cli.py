"""``vllm-compat``: a thin layer over :mod:`vllm_compat.api` (parsing, rendering, exit codes)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace

from . import api
from .api import CommandError, Exit, Report
from .target import Target, TargetError

EXIT_CODES = """exit codes:
  0   ok (verify: every applicable patch applied, every managed file matches its hash)
  2   usage error
  3   environment error: site-packages missing, unreadable or read-only, corrupt state, none of
      the patched distributions (speculators) installed there
  4   a target file does not parse, or a patch's anchor is missing in it
  10  pending: applicable patches are not applied (or the catalog changed since apply)
  11  drifted: managed files were edited by hand (revert refuses without --force)
  12  stale: a patched distribution or a dependency was reinstalled/upgraded since apply
  13  unsupported: an installed version no patch covers and not known-good (nor proven on this
      machine); check --against: a release outside the range that no patch reaches
  14  check: patched code does not bind to the installed vLLM
  15  the catalogs are inconsistent: colliding ids or names, contradictory patches, cycles,
      a patch writing outside its target package
  16  a catalog cannot be loaded: its folder is missing, a module fails to import, a bad
      pyproject.toml entry or entry point
  17  record cannot turn the hand edits into a patch that reproduces them (nothing written)
  18  check --against: a release's wheel cannot be fetched (no network, index unreachable)
  19  check --against: the index has no such release
  20  prove: the patched stack's hidden states differ from HF transformers, or no model could run
  21  an advisory matches the installed versions: a known-bad combination (--allow-advisory ID
      accepts one)
with --json, an error is a JSON object on stdout too: {"exit_code", "result", "error"}
"""


class UsageError(Exception):
    """A bad command line (exit 2), raised instead of argparse's exit so --json can report it."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise UsageError(f"{self.prog}: error: {message}", self.format_usage())


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group()
    where.add_argument("--site-packages", metavar="DIR", help="a folder laid out like site-packages")
    where.add_argument("--python", metavar="PATH", help="manage that interpreter's site-packages")
    common.add_argument("--catalog", action="append", default=[], metavar="DIR",
                        help="a user catalog folder, besides pyproject.toml's and entry points' (repeatable)")
    common.add_argument("-v", "--verbose", action="store_true")
    common.add_argument("-q", "--quiet", action="store_true",
                        help="status, verify: patches and files counted by state, not listed; apply: no file list")
    p = _Parser(
        prog="vllm-compat", description="Versioned source patches that keep speculators (and any installed "
                                        "package you patch with your own catalogs) working on current vLLM.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help, description=help, epilog=EXIT_CODES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    s = cmd("status", "show every patch's and managed file's state, and the advisories that match")
    s.add_argument("--json", action="store_true")
    allow = dict(action="append", default=[], metavar="ID",
                 help="accept this advisory (a known-bad combination that does not apply to you): exit 0, not 21")
    s.add_argument("--allow-advisory", **allow)
    a = cmd("apply", "apply every applicable patch, all files or none")
    a.add_argument("--json", action="store_true")
    a.add_argument("--dry-run", action="store_true", help="print the unified diff, write nothing")
    a.add_argument("--allow-unsupported", action="store_true", help="patch versions outside the proven range")
    v = cmd("verify", "exit 0 only when the patch state is complete and intact (never writes)")
    v.add_argument("--json", action="store_true")
    v.add_argument("--allow-unsupported", action="store_true")
    v.add_argument("--allow-advisory", **allow)
    r = cmd("revert", "restore the wheel's files (proven against RECORD) and remove shims and state")
    r.add_argument("--json", action="store_true")
    r.add_argument("--force", action="store_true", help="also discard hand edits")
    cmd("diff", "show managed files against the wheel's pristine content")
    c = cmd("check", "statically bind the patched code's vLLM imports and calls to the installed vLLM "
                     "(with --against/--wheel: to a release not installed, in a scratch copy)")
    c.add_argument("--json", action="store_true")
    c.add_argument("--against", action="append", default=[], metavar="DIST==VERSION",
                   help="check the catalogs against this release before upgrading to it (repeatable; "
                        "pip download --no-deps, cached; the installed site is only read)")
    c.add_argument("--wheel", action="append", default=[], metavar="FILE", help="the same, from a wheel file")
    pr = cmd("prove", "run the patched stack against HF transformers on tiny offline models and record a "
                      "proof that lets status/apply accept these exact files outside the proven range")
    pr.add_argument("--json", action="store_true")
    pr.add_argument("--server", action="store_true",
                    help="the server path (vllm serve + the hidden-states connector, as speculators 0.5-0.9 use it); "
                         "the default where the site's speculators has no generator")
    pr.add_argument("--connector", default="", metavar="MODULE:CLASS",
                    help="prove this hidden-states connector instead of vLLM's (FILE.py:CLASS puts FILE's folder on "
                         "the path); records no proof")
    pr.add_argument("--arch", action="append", default=[], metavar="NAME",
                    help="only this tiny model (repeatable); records no proof")
    rec = cmd("record", "turn hand edits of installed files into a patch module NAME.py in a user catalog "
                        "(the first --catalog, else pyproject.toml's first)")
    rec.add_argument("name", metavar="NAME", help="the module's name; the patch ids are PACKAGE.NAME")
    rec.add_argument("--package", action="append", default=[], metavar="PKG",
                     help="look for edits in this import package's files (default: every package the catalogs patch)")
    rec.add_argument("--wheel", action="append", default=[], metavar="WHEEL",
                     help="the installed version's wheel, for files apply never backed up (default: pip download)")
    rec.add_argument("--allow-unsupported", action="store_true")
    d = cmd("strip-debug", "remove added debug prints/logging/breakpoints from patched files")
    d.add_argument("--dry-run", action="store_true")
    d.add_argument("paths", nargs="*", metavar="PATH",
                   help="files outside the catalog: strip bare print()/breakpoint()/pdb only")
    return p


def _target(args: argparse.Namespace) -> Target:
    return Target.resolve(args.site_packages, args.python, args.catalog)


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _counted(states: Iterable[str]) -> str:
    """``27 pending, 5 not-applicable``: each state with how many are in it, most first."""
    counts = Counter(states)
    return ", ".join(f"{n} {state}" for state, n in counts.most_common()) or "none"


def _render(report: Report, verbose: bool, quiet: bool = False) -> str:
    lines = [f"site-packages: {report.site}"]
    lines += [f"  {pkg} {ver}" for pkg, ver in sorted(report.versions.items())]
    lines += [f"unsupported: {u}" for u in report.unsupported]
    lines += [f"note: {n}" for n in report.notes]
    for m in report.advisories:
        a = m.advisory
        found = ", ".join(f"{pkg} {ver}" for pkg, ver in sorted(m.versions.items()))
        lines += ["", f"advisory {a.id}{' (allowed)' if m.allowed else ''}: {a.title} ({found})",
                  f"  why: {a.why}", f"  upstream: {a.upstream}", f"  fix: {a.fix}"]
        if a.condition:
            lines.append(f"  only when: {m.to_dict()['condition']} (--allow-advisory {a.id} if not)")
    if quiet:
        lines += ["", f"patches: {_counted(p.state for p in report.patches)}",
                  f"files: {_counted(f.state for f in report.files)}"]
    rows = [("PATCH", "STATE", "DETAIL")]
    rows += [(p.id, p.state, p.reason) for p in report.patches if verbose or p.state != "not-applicable"]
    if report.patches and not quiet:
        lines += ["", _table(rows)] if len(rows) > 1 else [""]
        hidden = sum(p.state == "not-applicable" for p in report.patches) if not verbose else 0
        if hidden:
            lines.append(f"({hidden} patch(es) not applicable to these versions: -v lists them)")
    frows = [("FILE", "STATE", "DETAIL")] + [(f.path, f.state, f.detail) for f in report.files]
    if report.files and not quiet:
        lines += ["", _table(frows)]
    lines += ["", f"result: {report.code.name.lower()} (exit {int(report.code)})"]
    if report.code in (Exit.PENDING, Exit.STALE):
        lines.append(f"fix: vllm-compat apply --site-packages {report.site}")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    if args.command == "strip-debug":
        return _strip(args)
    target = _target(args)
    if args.command in ("status", "verify"):
        report = api.status(target) if args.command == "status" else api.verify(target)
        report = report.allowing(args.allow_advisory)
        known = {m.advisory.id for m in report.advisories}
        report = replace(report, notes=report.notes + tuple(
            f"--allow-advisory {i}: no such advisory matches this site" for i in args.allow_advisory if i not in known))
        code = report.code
        if args.command == "verify" and code == Exit.UNSUPPORTED and args.allow_unsupported:
            code = replace(report, unsupported=()).code
        print(json.dumps(report.to_dict(), indent=1) if args.json else _render(report, args.verbose, args.quiet))
        return int(code)
    if args.command == "apply":
        res = api.apply(target, dry_run=args.dry_run, allow_unsupported=args.allow_unsupported)
        if args.json:
            print(json.dumps({"exit_code": 0, "result": "ok", "dry_run": res.dry_run, "nothing_to_do": res.nothing_to_do,
                              "written": list(res.written), "diffs": res.diffs}, indent=1))
        elif res.dry_run:
            sys.stdout.write("".join(res.diffs.values()))
            print(f"dry run: {len(res.diffs)} file(s) would change; nothing written")
        elif res.nothing_to_do:
            print("nothing to do: every applicable patch is applied")
        else:
            applied = [p.id for p in res.report.patches if p.state != "not-applicable" and p.state != "obsolete"]
            print(f"{len(applied)} patch(es) applied; wrote {len(res.written)} file(s) and the manifest"
                  + ("" if args.quiet else ":"))
            if not args.quiet:
                print("\n".join(f"  {rel}" for rel in res.written))
        return int(Exit.OK)
    if args.command == "revert":
        res = api.revert(target, force=args.force)
        if args.json:
            print(json.dumps({"exit_code": 0, "result": "ok", "restored": list(res.restored),
                              "removed": list(res.removed)}, indent=1))
            return int(Exit.OK)
        if not res.restored and not res.removed:
            print("nothing to revert")
        for rel in res.restored:
            print(f"restored {rel}")
        for rel in res.removed:
            print(f"removed {rel}")
        return int(Exit.OK)
    if args.command == "record":
        return _record(args, target)
    if args.command == "diff":
        sys.stdout.write("".join(api.diff(target).values()))
        return int(Exit.OK)
    if args.command == "check" and (args.against or args.wheel):
        from .release.cli import run_against  # noqa: PLC0415

        return run_against(target, args)
    if args.command == "prove":
        from .release.cli import run_prove  # noqa: PLC0415

        return run_prove(target, args)
    if args.command == "check":
        report = api.check(target)
        if args.json:
            code = Exit.OK if report.ok else Exit.CHECK
            print(json.dumps({"ok": report.ok, "exit_code": int(code), "result": code.name.lower(),
                              "files_checked": report.files_checked, "calls_checked": report.calls_checked,
                              "files": list(report.files), "notes": list(report.notes),
                              "findings": [vars(f) for f in report.findings]}, indent=1))
        else:
            for f in report.findings:
                print(f"{f.file}:{f.line}: {f.kind}: {f.message}")
            for n in report.notes:
                print(f"note: {n}")
            print(f"checked {report.files_checked} file(s), {report.calls_checked} vLLM call(s): "
                  f"{'clean' if report.ok else f'{len(report.findings)} finding(s)'}")
        return int(Exit.OK if report.ok else Exit.CHECK)
    raise AssertionError(args.command)


def _record(args: argparse.Namespace, target: Target) -> int:
    res = api.record(target, args.name, tuple(args.package), tuple(args.wheel), args.allow_unsupported)
    print(f"recorded {', '.join(res.patches)} in {res.module}:")
    for rel, kinds in res.files.items():
        print(f"  {rel}: {', '.join(kinds)}")
    for rel, difference in res.differences.items():
        print(f"note: {rel}: the patch gives the same code, not the same bytes; apply wrote its version:")
        sys.stdout.write(difference)
    for note in res.notes:
        print(f"note: {note}")
    if res.written:
        print(f"the site is now applied with it; wrote {len(res.written)} file(s): {', '.join(res.written)}")
    print("fill in its TODO lines (title, why, upstream, remove_when); verify lists them until then")
    if not res.in_use:
        folder = res.module.rsplit("/", 1)[0]
        print(f"every command needs this catalog: pass --catalog {folder}, or add it to "
              f"[tool.vllm-compat] catalogs in pyproject.toml")
    return int(Exit.OK)


def _strip(args: argparse.Namespace) -> int:
    results = api.strip_debug(_target(args) if not args.paths or args.site_packages or args.python else None,
                              args.paths, dry_run=args.dry_run)
    for res in results:
        if res.diff and args.dry_run:
            sys.stdout.write(res.diff)
        removed = len(res.result.removed)
        print(f"{res.path}: removed {removed} debug statement(s)"
              + (f", {len(res.result.leftovers)} other edit(s) left for you" if res.result.leftovers else ""))
        for r in res.result.removed:
            print(f"  - line {r.line} [{r.kind}]: {r.code}")
        for o in res.result.leftovers:
            print(f"  ! line {o.line}: {o.summary}")
    if args.dry_run:
        print("dry run: nothing written")
    return int(Exit.OK)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:  # (argparse's message already reads "vllm-compat ...: error: ...")
        return _fail(str(exc), Exit.USAGE, "--json" in argv, usage=exc.usage)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s: %(message)s")
    as_json = bool(getattr(args, "json", False))
    try:
        return _run(args)
    except CommandError as exc:
        return _fail(str(exc), exc.code, as_json)
    except (TargetError, OSError) as exc:
        return _fail(str(exc), Exit.ENV, as_json)


def _fail(message: str, code: Exit, as_json: bool, usage: str = "") -> int:
    """One line on stderr, or with --json one JSON object on stdout (a CI step parses it)."""
    if as_json:
        print(json.dumps({"exit_code": int(code), "result": code.name.lower(), "error": message}, indent=1))
    else:
        sys.stderr.write(usage)
        print(message if usage else f"vllm-compat: error: {message}", file=sys.stderr)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
