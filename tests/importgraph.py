"""The import graph of packages, every import counted (late ones inside functions too, and
``TYPE_CHECKING`` ones), and its circles: between modules, and between rooms (the modules
grouped by their first ``depth`` name parts)."""

from __future__ import annotations

import ast
from pathlib import Path


def _name(root: Path, f: Path) -> str:
    parts = list(f.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph(roots: list[Path], scripts: bool = False) -> dict[str, set[str]]:
    """``scripts``: the roots are folders of scripts that import each other by bare name."""
    files = {_name(root, f): f for root in roots for f in root.rglob("*.py")}
    root_of = {m: m.split(".")[0] for m in files}
    g: dict[str, set[str]] = {m: set() for m in files}
    for m, f in files.items():
        pkg = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if scripts and t not in files and f"{root_of[m]}.{t}" in files:
                    t = f"{root_of[m]}.{t}"  # a script's bare import of a sibling script
                while t and t not in files:
                    t = t.rpartition(".")[0]
                # a module importing its own package's __init__ (or the reverse along the
                # same path) is how packages are built, not a circle between two rooms
                if t and t != m and not m.startswith(t + "."):
                    g[m].add(t)
    return g


def rooms(g: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in g.items():
        ra = ".".join(a.split(".")[:depth])
        out.setdefault(ra, set())
        for b in targets:
            rb = ".".join(b.split(".")[:depth])
            if rb != ra:
                out[ra].add(rb)
                out.setdefault(rb, set())
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found)
