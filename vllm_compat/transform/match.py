"""Where the code sought is: statements and expressions matched by their AST dumps, which are
computed only for statements whose cheap shape, head and words may match, and cached per file."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from .suites import _EMPTY, _suites


def _dump_stmts(code: str) -> str:
    return "\n".join(
        ast.dump(s, annotate_fields=False) for s in ast.parse(textwrap.dedent(code).strip()).body
    )


def _dump_expr(code: str) -> str:
    return ast.dump(ast.parse(textwrap.dedent(code).strip(), mode="eval").body, annotate_fields=False)


def _stmt_nodes(code: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(textwrap.dedent(code).strip() + "\n").body)


def _idents(tree: ast.AST) -> frozenset[str]:
    """The identifiers in an AST.  Code with that AST spells each of them out, so a statement
    whose words lack one of them cannot contain that code (see :meth:`_Ctx.words`)."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
        elif isinstance(n, (ast.keyword, ast.arg)) and n.arg:
            names.add(n.arg)
    return frozenset(names)


def _expr_idents(code: str) -> frozenset[str]:
    return _idents(ast.parse(textwrap.dedent(code).strip(), mode="eval"))


_WORD = re.compile(r"\w+")


@dataclass
class _Ctx:
    module: cst.Module
    scope: tuple[str, ...]
    # (what, id(node)) -> (node, value); holding the node keeps its id from being reused by a
    # new node.  The walk keeps unchanged nodes, so values carry over from edit to edit.
    _cache: dict[tuple[str, int], tuple[cst.CSTNode, object]]

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def _cached(self, what: str, node: cst.CSTNode):
        hit = self._cache.get((what, id(node)))
        return hit[1] if hit is not None and hit[0] is node else None

    def _store(self, what: str, node: cst.CSTNode, value: object):
        self._cache[what, id(node)] = (node, value)
        return value

    def text(self, node: cst.BaseStatement, own: bool = False) -> str:
        """The code of a statement without its leading comment lines (``own``: of a compound
        statement only its own part, its indented blocks emptied, as the walk looks into
        those statement by statement)."""
        what = "own" if own and not isinstance(node, cst.SimpleStatementLine) else "text"
        text = self._cached(what, node)
        if text is None:
            bare = node.with_changes(leading_lines=())
            text = self._store(what, node, self.code(_suites(bare, lambda b: _EMPTY) if what == "own" else bare))
        return text  # type: ignore[return-value]

    def spells(self, node: cst.BaseStatement, idents: frozenset[str], own: bool = False) -> bool:
        """Whether the text of ``node`` has each of ``idents`` as a word (text that is not
        ASCII may spell an identifier in another form with the same meaning: always true)."""
        what = "ownwords" if own and not isinstance(node, cst.SimpleStatementLine) else "words"
        words = self._cached(what, node)
        if words is None:
            text = self.text(node, own)
            words = self._store(what, node, frozenset(_WORD.findall(text)) if text.isascii() else ())
        return words == () or idents <= words  # type: ignore[operator]

    def stmt_dump(self, node: cst.BaseStatement) -> str:
        dump = self._cached("dump", node)
        if dump is None:
            # Leading comments are not code: dropped, so "# note\nx = 1" matches "x = 1".
            try:
                dump = _dump_stmts(self.text(node))
            except SyntaxError:  # e.g. a bare `return`/`yield` fragment never matches
                dump = ""
            self._store("dump", node, dump)
        return dump  # type: ignore[return-value]

    def in_scope(self, stack: Sequence[str]) -> bool:
        return tuple(stack[: len(self.scope)]) == self.scope


def _kind(node: cst.CSTNode) -> tuple[str, ...]:
    """A cheap shape of a statement (its type, or the types of a line's small statements):
    equal ASTs have equal shapes, so only statements of the wanted shape are dumped."""
    if isinstance(node, cst.SimpleStatementLine):
        return tuple(type(s).__name__ for s in node.body)
    return (type(node).__name__,)


def _head(stmt: cst.CSTNode | ast.AST | None) -> str | None:
    """A def's or class's name, or what a line's first small statement assigns to, calls or
    returns, as a dotted name (``"self.out"``, ``"self.run()"``); ``None`` for others.  Of a
    statement of libcst or of ast: statements with equal ASTs have equal heads where known."""
    if isinstance(stmt, cst.SimpleStatementLine):
        stmt = stmt.body[0] if stmt.body else None
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return _dotted(stmt.name) if isinstance(stmt.name, cst.Name) else _ascii(stmt.name)
    if isinstance(stmt, (cst.Assign, ast.Assign)):
        target = stmt.targets[0]
        return _dotted(target.target if isinstance(target, cst.AssignTarget) else target)
    if isinstance(stmt, (cst.AugAssign, cst.AnnAssign, ast.AugAssign, ast.AnnAssign)):
        return _dotted(stmt.target)
    return _dotted(stmt.value) if isinstance(stmt, (cst.Expr, cst.Return, ast.Expr, ast.Return)) else None


def _dotted(e: cst.CSTNode | ast.AST | None) -> str | None:
    if isinstance(e, (cst.Call, ast.Call)):
        name = _dotted(e.func)
        return None if name is None else name + "()"
    if isinstance(e, (cst.Attribute, ast.Attribute)):
        name, attr = _dotted(e.value), e.attr if isinstance(e.attr, str) else _ascii(e.attr.value)
        return None if name is None or attr is None else f"{name}.{attr}"
    return _ascii(e.value) if isinstance(e, cst.Name) else _ascii(e.id) if isinstance(e, ast.Name) else None


def _ascii(name: str) -> str | None:
    return name if name.isascii() else None  # ast normalises other identifiers: not known


# The statement types of libcst (as :func:`_kind` names them) for those of ast.
_KINDS = {
    "Expr": "Expr", "Assign": "Assign", "AugAssign": "AugAssign", "AnnAssign": "AnnAssign",
    "Return": "Return", "Raise": "Raise", "Assert": "Assert", "Delete": "Del", "Pass": "Pass",
    "Break": "Break", "Continue": "Continue", "Global": "Global", "Nonlocal": "Nonlocal",
    "Import": "Import", "ImportFrom": "ImportFrom",
}
_COMPOUND_KINDS = {
    "FunctionDef": "FunctionDef", "AsyncFunctionDef": "FunctionDef", "ClassDef": "ClassDef",
    "If": "If", "For": "For", "AsyncFor": "For", "While": "While", "With": "With",
    "AsyncWith": "With", "Try": "Try", "TryStar": "TryStar", "Match": "Match",
}


@dataclass(frozen=True)
class _Pattern:
    """Statements sought as a run in a block: each one's dump, shape and identifiers."""

    dumps: list[str]
    kinds: list[tuple[str, ...]]
    idents: list[frozenset[str]]
    heads: list[str | None]

    @classmethod
    def of(cls, code: str, nodes: Sequence[cst.BaseStatement] | None = None) -> _Pattern:
        """The statements of ``code``, taken from its AST: libcst's ``nodes`` of it, when
        given, say how they group into lines (``a; b`` is one statement of libcst)."""
        try:
            body = ast.parse(textwrap.dedent(code).strip()).body
        except SyntaxError:
            body = None
        if nodes is not None:
            sizes = [len(n.body) if isinstance(n, cst.SimpleStatementLine) else 1 for n in nodes]
            kinds = [_kind(n) for n in nodes]
        elif body is not None and all(type(s).__name__ in _KINDS or type(s).__name__ in _COMPOUND_KINDS for s in body):
            sizes, kinds = [], []
            for i, stmt in enumerate(body):
                name = type(stmt).__name__
                if name in _KINDS and i and sizes[-1] and stmt.lineno == body[i - 1].end_lineno:
                    sizes[-1] += 1  # after a `;`: the same line
                    kinds[-1] += (_KINDS[name],)
                else:
                    sizes.append(1 if name in _KINDS else 0)
                    kinds.append((_KINDS.get(name) or _COMPOUND_KINDS[name],))
            sizes = [n or 1 for n in sizes]
        else:  # let libcst report what does not parse
            return cls.of(code, _stmt_nodes(code))
        if body is None or sum(sizes) != len(body):
            codes = [cst.Module([]).code_for_node(n) for n in nodes or ()]
            return cls([_dump_stmts(c) for c in codes], kinds, [_idents(ast.parse(textwrap.dedent(c).strip())) for c in codes],
                       [_head(n) for n in nodes or ()])
        groups, at = [], 0
        for n in sizes:
            groups.append(body[at : at + n])
            at += n
        return cls(["\n".join(ast.dump(s, annotate_fields=False) for s in g) for g in groups], kinds,
                   [_idents(ast.Module(body=g, type_ignores=[])) for g in groups], [_head(g[0]) for g in groups])

    def first(self) -> _Pattern:
        return _Pattern(self.dumps[:1], self.kinds[:1], self.idents[:1], self.heads[:1])


def _find_run(ctx: _Ctx, body: Sequence[cst.BaseStatement], want: _Pattern) -> list[int]:
    """Start indexes of the runs of statements in ``body`` whose dumps equal ``want``'s; only
    statements of the wanted shape and head that spell out the wanted identifiers are dumped."""
    n = len(want.dumps)
    have = [_kind(s) for s in body]
    return [i for i in range(len(body) - n + 1)
            if have[i : i + n] == want.kinds
            and all(h is None or _head(s) in (None, h) for s, h in zip(body[i : i + n], want.heads))
            and all(ctx.spells(s, ids) for s, ids in zip(body[i : i + n], want.idents))
            and [ctx.stmt_dump(s) for s in body[i : i + n]] == want.dumps]
