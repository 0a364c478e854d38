"""Helpers of the tests of the static proof (``tests/test_check_*.py``): small vLLM-like
trees written by the tests themselves (they are not upstream code) and the check run on them."""

from __future__ import annotations

import textwrap
from pathlib import Path

from vllm_compat.check import CheckReport, check_sources, clear_cache


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """Write a fake site-packages: ``{"vllm/x.py": source}``; packages get an __init__."""
    files = {"vllm/__init__.py": "", **files}
    for rel, src in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))
    for d in {(root / rel).parent for rel in files}:
        while d != root and d.name:
            init = d / "__init__.py"
            if not init.exists():
                init.write_text("")
            d = d.parent
    return root


def check(root: Path, src: str, name: str = "user.py") -> CheckReport:
    clear_cache()
    return check_sources({name: textwrap.dedent(src)}, root)


def kinds(report: CheckReport) -> list[tuple[int, str]]:
    return [(f.line, f.kind) for f in report.findings]


def messages(report: CheckReport) -> str:
    return "\n".join(f.message for f in report.findings)


FUNC_TREE = {
    "vllm/funcs.py": """
        from typing import overload
        def f(a, b, c=3): pass
        def kwonly(a, *, k, opt=1): pass
        def posonly(a, /, b): pass
        def star(*args, **kwargs): pass
        def var_kw(a, **kw): pass
        @overload
        def over(x: int) -> int: ...
        @overload
        def over(x: str) -> str: ...
        def over(x, y=None): pass
    """,
    "vllm/reexport/__init__.py": "from vllm.funcs import f as g\n",
}
