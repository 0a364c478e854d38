"""The generated parts of docs/ lie between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``:
:func:`splice` puts a part's text there (``docs_gen.py`` renders every part, ``arch_sweep.py``
writes its own; both import this, neither imports the other)."""

from __future__ import annotations


def splice(body: str, name: str, text: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in body or end not in body:
        raise SystemExit(f"docs_gen: the markers of {name!r} are missing")
    start, stop = body.index(begin) + len(begin), body.index(end)
    return body[:start] + "\n" + text + "\n" + body[stop:]
