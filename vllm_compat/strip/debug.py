"""What counts as debug output: the debug kind of a statement, of a compound statement
holding nothing else, and of a code unit; the clauses that may be dropped whole."""

from __future__ import annotations

import ast

from .source import _Source

LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical"})
LOG_RECEIVERS = frozenset({"logger", "log", "LOGGER", "_logger", "_log", "logging"})
PDB_MODULES = frozenset({"pdb", "ipdb", "pudb"})
PDB_CALLS = frozenset({"set_trace", "post_mortem"})
# Compound statements removed whole when they were added and hold only debug output.
_WHOLE = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ()
)


def _bodies(node: ast.stmt) -> list[list[ast.stmt]]:
    out = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            out.append(value)
    for handler in getattr(node, "handlers", ()):
        out.append(handler.body)
    for case in getattr(node, "cases", ()):
        out.append(case.body)
    return out


def _last_name(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _is_pdb_module(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in PDB_MODULES
    # __import__("pdb").set_trace()
    return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
            and expr.func.id == "__import__" and len(expr.args) >= 1
            and isinstance(expr.args[0], ast.Constant) and expr.args[0].value in PDB_MODULES)


def _kind(stmt: ast.stmt, logging: bool) -> str | None:
    """The debug kind of a simple statement, or None when it is not debug output."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Name):
            return {"print": "print", "breakpoint": "breakpoint", "set_trace": "pdb"}.get(func.id)
        if isinstance(func, ast.Attribute):
            if func.attr in PDB_CALLS and _is_pdb_module(func.value):
                return "pdb"
            if logging and func.attr in LOG_METHODS and _last_name(func.value) in LOG_RECEIVERS:
                return "logging"
        return None
    if isinstance(stmt, ast.Import):
        if all(a.name.split(".")[0] in PDB_MODULES for a in stmt.names):
            return "pdb"
    elif isinstance(stmt, ast.ImportFrom):
        if stmt.level == 0 and (stmt.module or "").split(".")[0] in PDB_MODULES:
            return "pdb"
    return None


def _is_elif(src: _Source, stmt: ast.stmt, body: list[ast.stmt]) -> bool:
    if not (isinstance(stmt, ast.If) and body is stmt.orelse and len(body) == 1
            and isinstance(body[0], ast.If)):
        return False
    line = src.lines[body[0].lineno - 1]
    return line.encode("utf-8")[body[0].col_offset:].startswith(b"elif")


def _is_compound(stmt: ast.stmt) -> bool:
    return bool(_bodies(stmt))


def _leaves(stmt: ast.stmt):
    for body in _bodies(stmt):
        for s in body:
            if _is_compound(s):
                yield from _leaves(s)
            else:
                yield s


def _debug_only_kind(stmt: ast.stmt, logging: bool) -> str | None:
    """For a compound statement holding nothing but debug output (and ``pass``): the kind
    of its first debug statement."""
    if not isinstance(stmt, _WHOLE):
        return None
    first = None
    for leaf in _leaves(stmt):
        if isinstance(leaf, ast.Pass):
            continue
        kind = _kind(leaf, logging)
        if kind is None:
            return None
        first = first or kind
    return first


def _is_debug(stmt: ast.stmt, logging: bool) -> bool:
    if _is_compound(stmt):
        return _debug_only_kind(stmt, logging) is not None
    return _kind(stmt, logging) is not None


def _clause_header(src: _Source, stmt: ast.stmt, body: list[ast.stmt]) -> int | None:
    """The unit of the ``else:``/``finally:`` line heading ``body``, when ``body`` is such a
    clause of ``stmt`` that could be dropped whole (not an ``elif``, not on the header line,
    not the only clause of a ``try``)."""
    if body is getattr(stmt, "finalbody", None):
        if not getattr(stmt, "handlers", None):
            return None
        word = "finally"
    elif body is getattr(stmt, "orelse", None):
        word = "else"
    else:
        return None
    first = src.unit_of_line[body[0].lineno]
    u = first - 1
    while u >= 0 and src.units[u].trivia:
        u -= 1
    if u < 0:
        return None
    text = src.units[u].text.split("#", 1)[0].strip()
    return u if text.replace(" ", "") == word + ":" else None


def _unit_debug_kind(src: _Source, u: int, logging: bool) -> str | None:
    """The kind of a code unit made of debug statements only (None otherwise)."""
    stmts = src.unit_stmts[u]
    kinds = [None if _is_compound(s) else _kind(s, logging) for s in stmts]
    if not kinds or None in kinds:
        return None
    return kinds[0]


def _bound_names(stmt: ast.Import | ast.ImportFrom) -> list[str] | None:
    names = []
    for alias in stmt.names:
        if alias.name == "*":
            return None
        if alias.asname:
            names.append(alias.asname)
        elif isinstance(stmt, ast.Import):
            names.append(alias.name.split(".")[0])
        else:
            names.append(alias.name)
    return names
