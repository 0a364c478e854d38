"""Console entry point: ``verify`` first tries the import-free fast path (:mod:`.fast`);
everything else, and any verify that is not clean, goes through the full CLI (:mod:`.cli`)."""

from __future__ import annotations

import json
import os
import sys

from .fast import default_site, todo_notes, verified


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["verify"] and _fast_verify(argv[1:]) == 0:
        return 0
    from .cli import main as full  # noqa: PLC0415

    return full(argv)


def _fast_verify(argv: list[str]) -> int | None:
    """``vllm-compat verify [--site-packages DIR] [--catalog DIR]... [--json]`` answered on the
    fast path, or ``None`` when the full path must answer (other options, or anything not
    verified)."""
    site, as_json, catalogs, rest = None, False, [], list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--json":
            as_json = True
        elif arg in ("--site-packages", "--catalog") and rest:
            value = rest.pop(0)
            site, catalogs = (value, catalogs) if arg == "--site-packages" else (site, [*catalogs, value])
        elif arg.startswith("--site-packages="):
            site = arg.split("=", 1)[1]
        elif arg.startswith("--catalog="):
            catalogs.append(arg.split("=", 1)[1])
        else:
            return None
    site = os.path.abspath(site or default_site())
    manifest = verified(site, [os.path.abspath(c) for c in catalogs])
    if manifest is None:
        return None
    versions = {pkg: snap["version"] for pkg, snap in manifest["dists"].items()}
    notes = todo_notes(manifest)
    if as_json:
        print(json.dumps({"site": site, "versions": versions, "exit_code": 0, "result": "ok",
                          "notes": notes,
                          "patches": [{"id": p, "state": "applied"} for p in manifest["patches"]],
                          "files": [{"path": f, "state": "applied"} for f in manifest["files"]]}, indent=1))
    else:
        print(f"ok: {len(manifest['patches'])} patch(es) applied, {len(manifest['files'])} file(s) intact "
              f"in {site} ({', '.join(f'{k} {v}' for k, v in sorted(versions.items()))})")
        for note in notes:
            print(f"note: {note}")
    return 0
