"""Console entry point: ``verify`` first tries the import-free fast path (:mod:`.fast`);
everything else, and any verify that is not clean, goes through the full CLI."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["verify"]:
        from .fast import try_verify  # noqa: PLC0415

        if try_verify(argv[1:]) == 0:
            return 0
    from .cli import main as full  # noqa: PLC0415

    return full(argv)
