"""Helpers of the ``strip_debug`` tests (``tests/test_strip*.py``): the real speculators 0.3.0
files, and an inserter that walks a file's statement tree and adds debug output of every
supported kind at chosen positions."""

from __future__ import annotations

import ast
import subprocess
import zipfile
from dataclasses import dataclass

import pytest
import upstream

from vllm_compat.strip import strip_debug

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"
FILES = (GENERATOR, WORKER)


def load_sources() -> dict[str, str]:
    """The pristine ``FILES`` of the speculators 0.3.0 wheel (the test is skipped without it)."""
    try:
        whl = upstream.wheel("speculators", "0.3.0")
    except (subprocess.CalledProcessError, FileNotFoundError, OSError) as exc:
        pytest.skip(f"speculators 0.3.0 wheel not available: {exc}")
    with zipfile.ZipFile(whl) as zf:
        return {name: zf.read(name).decode("utf-8") for name in FILES}


# ---------------------------------------------------------------------------------------------
# The inserter


@dataclass(frozen=True, order=True)
class Point:
    """A place where a statement may go: before line ``line`` (1-based), at ``indent``."""

    line: int
    indent: str
    module: bool  # a module-level point


def _bodies(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement blocks of a compound statement: body, else, finally, then each handler's."""
    blocks = [getattr(node, name, None) for name in ("body", "orelse", "finalbody")]
    blocks += [handler.body for handler in getattr(node, "handlers", ())]
    return [b for b in blocks if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]


def insertion_points(source: str) -> list[Point]:
    """Every position before a statement and after the last statement of every block."""
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    points: set[Point] = set()

    def visit(body: list[ast.stmt], module: bool) -> None:
        first = body[0]
        text = lines[first.lineno - 1]
        indent = text[: len(text) - len(text.lstrip())]
        if text[len(indent):].startswith(("elif", "else")) or len(indent) != first.col_offset:
            return  # an elif chain, or a body on its header's line
        for stmt in body:
            start = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            points.add(Point(start, indent, module))
            for inner in _bodies(stmt):
                visit(inner, False)
        points.add(Point(body[-1].end_lineno + 1, indent, module))

    visit(tree.body, True)
    # Never above a docstring (it would stop being the docstring: not a realistic edit).
    docstrings = {
        node.body[0].lineno for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node, clean=False) is not None
    }
    return sorted(p for p in points if p.line not in docstrings)


# Debug snippets: (template lines, needs). ``needs`` names a module import the snippet relies
# on, which the inserter adds too (and the stripper must remove as "made unused").
SNIPPETS: list[tuple[str, str | None]] = [
    ('print("DEBUG here")', None),
    ('print(f"DEBUG {len([1, 2])=}")  # trailing comment', None),
    ('print("DEBUG to stderr", file=sys.stderr)', "sys"),
    ('log.info("DEBUG via log")', None),
    ('logger.debug("DEBUG via logger %s", 1)', None),
    ('self.logger.warning("DEBUG via self.logger")', None),
    ('self._log.error("DEBUG via self._log")', None),
    ('LOGGER.critical("DEBUG")', None),
    ('logging.info("DEBUG via logging")', "logging"),
    ('log.exception("DEBUG")', None),
    ("breakpoint()", None),
    ("import pdb; pdb.set_trace()", None),
    ("import ipdb\nipdb.set_trace()", None),
    ("from pdb import set_trace; set_trace()", None),
    ('__import__("pdb").set_trace()', None),
    ('print(\n    "DEBUG multi-line",\n    [1, 2],\n    sep=", ",\n)', None),
    ('log.debug(\n    "DEBUG multi-line %s",\n    3,\n)', None),
    ('# DEBUG: remove me\nprint("DEBUG with comment")', None),
    ('\nprint("DEBUG between blank lines")\n', None),
    ('print("a"); print("b")', None),
    ('if True:\n    print("DEBUG in an added if")\n    log.debug("DEBUG")', None),
    ('if __debug__:\n    # inspect\n    breakpoint()\nelse:\n    pass', None),
    ("for _dbg in range(3):\n    print(_dbg)", None),
    ('while False:\n    print("never")', None),
    ('try:\n    print("DEBUG in try")\nexcept Exception:\n    log.exception("DEBUG")', None),
    ('with open("/tmp/dbg.txt", "a") as _fh:\n    print("DEBUG", file=_fh)', None),
    ("if True:\n    if True:\n        import pdb; pdb.set_trace()", None),
]


def render(snippet: str, indent: str) -> str:
    return "".join((indent + line if line else "") + "\n" for line in snippet.split("\n"))


def instrument(source: str, chosen: list[tuple[Point, str]], module_points: list[Point]) -> str:
    """``source`` with each snippet inserted at its point (plus the imports it needs)."""
    tree = ast.parse(source)
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    inserts: list[tuple[int, int, str]] = []
    needs = set()
    for n, (point, snippet) in enumerate(chosen):
        inserts.append((point.line, -len(point.indent), n, render(snippet, point.indent)))
        need = dict(SNIPPETS).get(snippet)
        if need and need not in imported:
            needs.add(need)
    for k, need in enumerate(sorted(needs)):
        point = module_points[(7 * k + 3) % len(module_points)]
        inserts.append((point.line, 0, -1 - k, f"import {need}\n"))
    lines = source.splitlines(keepends=True)
    # Same line: deeper blocks first, so a block end never swallows a shallower insertion.
    for line, _, _, text in sorted(inserts, reverse=True):
        lines.insert(line - 1, text)
    out = "".join(lines)
    ast.parse(out)  # the instrumented file must be valid Python
    return out


def instrument_many(source: str, seed: int, count: int) -> tuple[str, list[tuple[Point, str]]]:
    points = insertion_points(source)
    module_points = [p for p in points if p.module]
    chosen = []
    for k in range(count):
        point = points[(seed * 31 + k * 17) % len(points)]
        snippet = SNIPPETS[(seed + k * 5) % len(SNIPPETS)][0]
        chosen.append((point, snippet))
    return instrument(source, chosen, module_points), chosen


def check_restores(current: str, expected: str, again: bool = True):
    result = strip_debug(current, expected)
    assert result.leftovers == ()
    assert result.source == expected  # byte-identical
    assert result.changed == (current != expected)
    if again:
        second = strip_debug(result.source, expected)
        assert second.removed == () and second.source == expected and not second.changed
    return result
