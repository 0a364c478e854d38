"""Carrying out a patch's edits on source text with libcst (the only module that imports it).

Code is matched by its AST (``ast.dump`` without positions), so the target's formatting and
comments do not matter, while libcst keeps every byte of the file that is not edited.  Each
edit is a fixed point: where its result is already present it changes nothing.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import libcst as cst

from .patch import AddKeyword, Edit, InsertAfter, Patch, RemoveKeyword, ReplaceDef, ReplaceExpr, ReplaceStmt

__all__ = ["TransformError", "apply_edits", "transform_file"]


class TransformError(Exception):
    """An edit could not be carried out: its anchor is missing or the result is invalid."""

    def __init__(self, patch_id: str, file: str, message: str) -> None:
        super().__init__(f"{patch_id}: {file}: {message}")
        self.patch_id = patch_id
        self.file = file


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


# -- the statement walk --------------------------------------------------------------------
#
# An edit is carried out by one walk over the statements of its scope's subtree, post-order
# like a ``CSTTransformer`` (an inner block is edited before the block holding it) but never
# descending into expressions: only an edit of expressions has libcst visit them, and only in
# the statements that may hold its code.  Unchanged nodes are kept (not copied), so the
# statement caches of :class:`_Ctx` stay valid across a file's edits.

_SUITES = ("body", "orelse", "handlers", "finalbody", "cases")
_CLAUSES = (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase, cst.If)
_DEFS = (cst.FunctionDef, cst.ClassDef)
_EMPTY = cst.IndentedBlock(body=())


class _Editor:
    """One edit's hooks into the walk."""

    def __init__(self, ctx: _Ctx) -> None:
        self.ctx = ctx

    def exprs(self, original: cst.BaseStatement, updated: cst.BaseStatement, stack: list[str]) -> cst.BaseStatement:
        """``updated`` with its own expressions edited (a compound statement's, not its blocks')."""
        return updated

    def block(self, body: list[cst.BaseStatement], stack: list[str], top: bool) -> list[cst.BaseStatement]:
        """A block's statements (already walked) after the edit."""
        return body

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode, stack: list[str]) -> cst.CSTNode | list:
        return updated


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _walk_stmt(ed: _Editor, node: cst.BaseStatement, stack: list[str]) -> cst.BaseStatement | list:
    """``node`` after the edit: ``node`` itself where nothing changed, a list of statements
    where a def was replaced by several."""
    inner = [*stack, node.name.value] if isinstance(node, _DEFS) else stack
    depth = min(len(inner), len(ed.ctx.scope))
    if tuple(inner[:depth]) != ed.ctx.scope[:depth]:
        return node  # neither in nor around the scope
    if isinstance(node, cst.SimpleStatementLine):
        return ed.exprs(node, node, stack)
    new = ed.exprs(node, _suites(node, lambda b: _walk_block(ed, b, inner)), stack)
    return ed.leave_def(node, new, stack) if isinstance(node, _DEFS) else new


def _walk_body(ed: _Editor, body: Sequence[cst.BaseStatement], stack: list[str]) -> list[cst.BaseStatement]:
    out: list[cst.BaseStatement] = []
    for stmt in body:
        new = _walk_stmt(ed, stmt, stack)
        out.extend(new) if isinstance(new, list) else out.append(new)
    return out


def _walk_block(ed: _Editor, block: cst.IndentedBlock, stack: list[str]) -> cst.IndentedBlock:
    body = ed.block(_walk_body(ed, block.body, stack), stack, top=False)
    return block if _same(body, block.body) else block.with_changes(body=body)


def _walk_module(ed: _Editor, module: cst.Module) -> cst.Module:
    body = ed.block(_walk_body(ed, module.body, []), [], top=not ed.ctx.scope)
    return module if _same(body, module.body) else module.with_changes(body=body)


def _suites(node: cst.CSTNode, edit: Callable[[cst.IndentedBlock], cst.IndentedBlock]) -> cst.CSTNode:
    """``node`` (a compound statement) with ``edit`` applied to each of its indented blocks,
    through its else/except/finally/case clauses and elif chain; rebuilt only where one changed."""
    changes: dict[str, object] = {}
    for name in _SUITES:
        value = getattr(node, name, None)
        if isinstance(value, cst.IndentedBlock):
            new: object = edit(value)
        elif isinstance(value, _CLAUSES):
            new = _suites(value, edit)
        elif isinstance(value, (list, tuple)):
            items = [_suites(v, edit) for v in value]
            new = value if _same(items, value) else items
        else:
            continue
        if new is not value:
            changes[name] = new
    return node.with_changes(**changes) if changes else node


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


class _StmtEditor(_Editor):
    """Applies a statement-level edit to every statement block inside the scope."""

    def __init__(self, ctx: _Ctx, edit: ReplaceStmt | InsertAfter) -> None:
        super().__init__(ctx)
        self.edit = edit
        self.new_nodes = _stmt_nodes(edit.new)
        self.new = _Pattern.of(edit.new, self.new_nodes)
        old = edit.old if isinstance(edit, ReplaceStmt) else edit.after
        self.old = _Pattern.of(old) if old else _Pattern([], [], [], [])
        self.old_dump = self.old.dumps
        self.matches = 0
        self.present = 0

    def _edit_body(self, body: list[cst.BaseStatement], stack: list[str], top: bool) -> list[cst.BaseStatement]:
        if not self.ctx.in_scope(stack):
            return body
        self.present += len(_find_run(self.ctx, body, self.new))
        if isinstance(self.edit, ReplaceStmt):
            out, i = [], 0
            starts = set(_find_run(self.ctx, body, self.old))
            while i < len(body):
                if i in starts:
                    self.matches += 1
                    first = self.new_nodes[0].with_changes(leading_lines=body[i].leading_lines)
                    out.extend([first, *self.new_nodes[1:]])
                    i += len(self.old_dump)
                else:
                    out.append(body[i])
                    i += 1
            return out
        # InsertAfter
        if self.old_dump:
            points = [i + len(self.old_dump) for i in _find_run(self.ctx, body, self.old)]
        elif top:
            already = _find_run(self.ctx, body, self.new)
            points = [] if already else [_after_preamble(body, module=not self.ctx.scope)]
            self.matches += bool(already)
        else:
            points = []
        body = list(body)
        for p in reversed(points):
            self.matches += 1
            # The insertion is recognised by its first statement, so a later patch (ordered
            # `after` this one) may rewrite the rest without breaking t(t(x)) == t(x).
            if not _find_run(self.ctx, body[p : p + 1], self.new.first()):
                body[p:p] = self.new_nodes
        return body

    def block(self, body: list[cst.BaseStatement], stack: list[str], top: bool) -> list[cst.BaseStatement]:
        if not self.old_dump and isinstance(self.edit, InsertAfter) and not top:
            return body  # preamble insertion happens once, on the scope's own body
        return self._edit_body(body, stack, top)

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode, stack: list[str]) -> cst.CSTNode:
        name = original.name.value  # type: ignore[attr-defined]
        if self.old_dump or not isinstance(self.edit, InsertAfter) or (*stack, name) != self.ctx.scope:
            return updated
        block = updated.body  # type: ignore[attr-defined]
        body = self._edit_body(list(block.body), [*stack, name], top=True)  # the body belongs to the scope
        return updated if _same(body, block.body) else updated.with_changes(body=block.with_changes(body=body))


def _after_preamble(body: Sequence[cst.CSTNode], module: bool) -> int:
    """Index after a docstring and (at module level) the leading imports."""
    i = 0
    if body and _is_docstring(body[0]):
        i = 1
    if module:
        while i < len(body) and _is_import(body[i]):
            i += 1
    return i


def _is_docstring(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.SimpleStatementLine)
        and len(node.body) == 1
        and isinstance(node.body[0], cst.Expr)
        and isinstance(node.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_import(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body)
    if isinstance(node, cst.Try):  # try: import x / except ImportError: ...
        return all(_is_import(s) for s in node.body.body)
    return False


class _ExprVisitor(_Editor, cst.CSTTransformer):
    """An edit of expressions: libcst visits a statement only where its text holds every
    identifier of one of ``idents``, and of a compound statement only its own expressions
    (the walk goes through its blocks).  ``changed`` counts the nodes it replaced."""

    idents: tuple[frozenset[str], ...] = ()

    def __init__(self, ctx: _Ctx) -> None:
        _Editor.__init__(self, ctx)
        cst.CSTTransformer.__init__(self)
        self.stack: list[str] = []
        self.changed = 0

    def in_scope(self) -> bool:
        return self.ctx.in_scope(self.stack)

    def exprs(self, original: cst.BaseStatement, updated: cst.BaseStatement, stack: list[str]) -> cst.BaseStatement:
        if not self.ctx.in_scope([*stack, original.name.value] if isinstance(original, _DEFS) else stack):
            return updated
        if not any(self.ctx.spells(original, idents, own=True) for idents in self.idents):
            return updated
        self.stack = list(stack)
        changed = self.changed
        new = updated.visit(self)
        return new if self.changed != changed else updated  # type: ignore[return-value]

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.IndentedBlock):
            return False  # the walk goes through it statement by statement
        if isinstance(node, _DEFS):
            self.stack.append(node.name.value)
        return super().on_visit(node)

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        if isinstance(original, _DEFS):
            self.stack.pop()
        return super().on_leave(original, updated)


class _ExprEditor(_ExprVisitor):
    def __init__(self, ctx: _Ctx, edit: ReplaceExpr) -> None:
        super().__init__(ctx)
        self.old_dump = _dump_expr(edit.old)
        self.new_dump = _dump_expr(edit.new)
        self.idents = (_expr_idents(edit.old), _expr_idents(edit.new))
        self.new_node = cst.parse_expression(textwrap.dedent(edit.new).strip())
        self.old_type = type(cst.parse_expression(textwrap.dedent(edit.old).strip()))
        self.new_type = type(self.new_node)
        self.matches = 0
        self.present = 0

    def _dump(self, node: cst.CSTNode) -> str:
        try:
            return _dump_expr(self.ctx.code(node))
        except SyntaxError:
            return ""

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self.new_type) and self.in_scope() and self._dump(node) == self.new_dump:
            self.present += 1
            return False  # already rewritten: do not rewrite what it contains
        return super().on_visit(node)

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        result = super().on_leave(original, updated)
        if (
            isinstance(original, self.old_type)
            and self.in_scope()
            and self._dump(original) == self.old_dump
        ):
            self.matches += 1
            self.changed += 1
            return self.new_node.with_changes(
                lpar=getattr(original, "lpar", ()), rpar=getattr(original, "rpar", ())
            ) if hasattr(self.new_node, "lpar") else self.new_node
        return result


def _shape(node: cst.CSTNode) -> tuple[str, ...]:
    """The types of the statements in a def's body, a line's small statements one by one:
    defs with equal ASTs have equal shapes."""
    return tuple(type(x).__name__ for s in node.body.body  # type: ignore[attr-defined]
                 for x in (s.body if isinstance(s, cst.SimpleStatementLine) else (s,)))


class _DefReplacer(_Editor):
    def __init__(self, ctx: _Ctx, edit: ReplaceDef) -> None:
        super().__init__(ctx)
        self.new_nodes = _stmt_nodes(edit.new)
        self.new_dump = _dump_stmts(edit.new)
        self.found = 0

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode, stack: list[str]) -> cst.CSTNode | list:
        if (*stack, original.name.value) != self.ctx.scope:  # type: ignore[attr-defined]
            return updated
        self.found += 1
        new = self.new_nodes
        if len(new) == 1 and type(new[0]) is type(original) and _shape(new[0]) == _shape(original) \
                and self.ctx.stmt_dump(original) == self.new_dump:
            return updated  # (a def of another shape differs: no need to dump it)
        first = self.new_nodes[0].with_changes(leading_lines=original.leading_lines)  # type: ignore[attr-defined]
        return [first, *self.new_nodes[1:]]


class _KeywordEditor(_ExprVisitor):
    """Adds or removes one keyword argument of every call of a given callee."""

    def __init__(self, ctx: _Ctx, edit: AddKeyword | RemoveKeyword) -> None:
        super().__init__(ctx)
        self.edit = edit
        self.callee = _dump_expr(edit.call)
        self.idents = (_expr_idents(edit.call),)
        self.calls = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.CSTNode:
        if not self.in_scope() or _dump_expr(self.ctx.code(original.func)) != self.callee:
            return updated
        self.calls += 1
        kw = self.edit.keyword
        has = [a for a in updated.args if a.keyword is not None and a.keyword.value == kw]
        if isinstance(self.edit, RemoveKeyword):
            args = [a for a in updated.args if a not in has]
            if has and args:  # keep the last argument's trailing comma style
                args[-1] = args[-1].with_changes(comma=updated.args[-1].comma)
            self.changed += bool(has)
            return updated.with_changes(args=args) if has else updated
        if has:
            return updated
        args = list(updated.args)
        new = cst.Arg(keyword=cst.Name(kw), value=cst.parse_expression(self.edit.value),
                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        if args:
            last = args[-1]
            if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
                # Lay the new argument out like the others (one per line in a multi-line call).
                args[-1] = last.with_changes(comma=args[-2].comma)
                new = new.with_changes(comma=last.comma)
            else:
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new)
        self.changed += 1
        return updated.with_changes(args=args)


def _visit(module: cst.Module, scope: tuple[str, ...], editor: _Editor) -> cst.Module:
    """The module after ``editor``'s walk of the subtree of the def/class named by ``scope``
    (the whole module where ``scope`` is empty or not found along a chain of bodies)."""
    nodes: list[cst.CSTNode] = [module]
    chain: list[int] = []
    body: Sequence[cst.CSTNode] = module.body
    for name in scope:
        index = next((i for i, n in enumerate(body)
                      if isinstance(n, (cst.ClassDef, cst.FunctionDef)) and n.name.value == name), None)
        if index is None or not isinstance(body[index].body, cst.IndentedBlock):  # type: ignore[union-attr]
            return _walk_module(editor, module)  # let the edit report what it cannot find
        chain.append(index)
        nodes.append(body[index])
        body = body[index].body.body  # type: ignore[union-attr]
    if not scope:
        return _walk_module(editor, module)
    new: object = _walk_stmt(editor, nodes[-1], list(scope[:-1]))  # type: ignore[arg-type]
    if new is nodes[-1]:
        return module
    for parent, index in zip(reversed(nodes[:-1]), reversed(chain)):
        replacement = new if isinstance(new, list) else [new]
        if isinstance(parent, cst.Module):
            items = list(parent.body)
            items[index : index + 1] = replacement
            new = parent.with_changes(body=items)
        else:
            block = parent.body  # type: ignore[attr-defined]
            items = list(block.body)
            items[index : index + 1] = replacement
            new = parent.with_changes(body=block.with_changes(body=items))
    return new  # type: ignore[return-value]


def _apply_one(module: cst.Module, edit: Edit, patch_id: str, cache: dict | None = None) -> cst.Module:
    # ``cache`` is shared by the edits of one file: libcst reuses unchanged nodes, so most
    # statements' dumps carry over from one edit to the next.
    ctx = _Ctx(module, tuple(edit.scope.split(".")) if edit.scope else (), {} if cache is None else cache)
    if isinstance(edit, ReplaceDef):
        t = _DefReplacer(ctx, edit)
        out = _visit(module, ctx.scope[:-1], t)
        if t.found:
            return out
        if not edit.create:
            raise TransformError(patch_id, edit.file, f"no def or class {edit.scope!r}")
        parent = edit.scope.rsplit(".", 1)[0] if "." in edit.scope else ""
        return _apply_one(module, InsertAfter(edit.file, parent, _last_stmt(module, parent), edit.new), patch_id)
    if isinstance(edit, (AddKeyword, RemoveKeyword)):
        t4 = _KeywordEditor(ctx, edit)
        out = _visit(module, ctx.scope, t4)
        if not t4.calls:
            raise TransformError(patch_id, edit.file, f"no call of {edit.call} in {edit.scope or 'module'}")
        return out
    if isinstance(edit, ReplaceExpr):
        t2 = _ExprEditor(ctx, edit)
        out = _visit(module, ctx.scope, t2)
        if not t2.matches and not t2.present:
            raise TransformError(patch_id, edit.file, f"expression not found in {edit.scope or 'module'}: {edit.old.strip()}")
        return out
    if isinstance(edit, (ReplaceStmt, InsertAfter)):
        t3 = _StmtEditor(ctx, edit)
        out = _visit(module, ctx.scope, t3)
        if isinstance(edit, ReplaceStmt):
            if t3.present and not t3.matches:
                return module
            if not t3.matches:
                raise TransformError(patch_id, edit.file, f"statement not found in {edit.scope or 'module'}:\n{textwrap.indent(textwrap.dedent(edit.old).strip(), '    ')}")
            if edit.count and t3.matches != edit.count:
                raise TransformError(patch_id, edit.file, f"expected {edit.count} match(es) of a statement, found {t3.matches}")
        elif not t3.matches:
            raise TransformError(patch_id, edit.file, f"insertion point not found in {edit.scope or 'module'}: {edit.after.strip() or '<preamble>'}")
        return out
    raise TypeError(f"unknown edit type {type(edit).__name__}")


def _last_stmt(module: cst.Module, scope: str) -> str:
    body: Sequence[cst.CSTNode] = module.body
    for name in scope.split(".") if scope else ():
        node = next(n for n in body if isinstance(n, (cst.ClassDef, cst.FunctionDef)) and n.name.value == name)
        body = node.body.body  # type: ignore[union-attr]
    return module.code_for_node(body[-1].with_changes(leading_lines=()))  # type: ignore[union-attr]


def apply_edits(source: str, edits: Iterable[tuple[str, Edit]], filename: str = "<patched>") -> str:
    """Apply ``(patch_id, edit)`` pairs in order to ``source``; the result must compile."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise TransformError("-", filename, f"target does not parse: line {exc.raw_line}: {exc.message}") from exc
    cache: dict = {}
    for patch_id, edit in edits:
        module = _apply_one(module, edit, patch_id, cache)
    out = module.code
    try:
        compile(out, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise TransformError("-", filename, f"result does not compile: {exc}") from exc
    return out


def transform_file(rel: str, source: str, patches: Sequence[Patch]) -> str:
    """The content of ``rel`` after every edit of ``patches`` (already ordered) on it."""
    return apply_edits(source, ((p.id, e) for p in patches for e in p.edits if e.file == rel), rel)
