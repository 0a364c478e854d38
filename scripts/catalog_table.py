"""Print the catalog as the README's markdown table; `--write` updates README.md in place
(between the `catalog:begin`/`catalog:end` markers). A test keeps the README in sync."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- catalog:begin -->", "<!-- catalog:end -->"


def table() -> str:
    sys.path.insert(0, str(ROOT))
    from vllm_compat.catalog import load  # noqa: PLC0415

    rows = ["| patch | speculators | requires | what it fixes | remove when |", "|---|---|---|---|---|"]
    for p in load().patches:
        req = ", ".join(f"{k} {v}" for k, v in sorted(p.requires.items())) or "-"
        rows.append(f"| `{p.id}` | {p.target_versions} | {req} | {p.title} | {p.remove_when} |")
    return "\n".join(rows)


def main() -> int:
    text = table()
    if "--write" in sys.argv:
        readme = ROOT / "README.md"
        body = readme.read_text()
        start, end = body.index(BEGIN) + len(BEGIN), body.index(END)
        readme.write_text(body[:start] + "\n" + text + "\n" + body[end:])
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
