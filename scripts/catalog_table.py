"""Print the catalog as markdown; `--write` updates docs/catalog.md (between the
`catalog:begin`/`catalog:end` markers). The renderer is scripts/docs_gen.py's; a test keeps the
page in sync."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_markers import splice  # noqa: E402
from docs_gen import PARTS, catalog  # noqa: E402


def main() -> int:
    text = catalog()
    if "--write" in sys.argv:
        path = PARTS["catalog"][0]
        path.write_text(splice(path.read_text(encoding="utf-8"), "catalog", text), encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
