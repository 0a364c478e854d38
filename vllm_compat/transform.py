"""Carrying out a patch's edits on source text with libcst (the only module that imports it).

Code is matched by its AST (``ast.dump`` without positions), so the target's formatting and
comments do not matter, while libcst keeps every byte of the file that is not edited.  Each
edit is a fixed point: where its result is already present it changes nothing.
"""

from __future__ import annotations

import ast
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


def _idents(code: str, mode: str) -> frozenset[str]:
    """The identifiers in ``code``'s AST.  Code with the same AST spells each of them out, so
    a statement whose (ASCII) text lacks one of them cannot contain that code."""
    names: set[str] = set()
    for n in ast.walk(ast.parse(textwrap.dedent(code).strip(), mode=mode)):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
        elif isinstance(n, (ast.keyword, ast.arg)) and n.arg:
            names.add(n.arg)
    return frozenset(names)


@dataclass
class _Ctx:
    module: cst.Module
    scope: tuple[str, ...]
    # (what, id(node)) -> (node, value); holding the node keeps its id from being reused by a
    # new node.  The walk keeps unchanged nodes, so values carry over from edit to edit.
    _cache: dict[tuple[str, int], tuple[cst.CSTNode, str]]

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def _cached(self, what: str, node: cst.CSTNode, make) -> str:
        hit = self._cache.get((what, id(node)))
        if hit is not None and hit[0] is node:
            return hit[1]
        value = make(node)
        self._cache[(what, id(node))] = (node, value)
        return value

    def text(self, node: cst.CSTNode) -> str:
        return self._cached("text", node, self.code)

    def stmt_dump(self, node: cst.CSTNode) -> str:
        return self._cached("dump", node, self._stmt_dump)

    def _stmt_dump(self, node: cst.CSTNode) -> str:
        # Leading comments are not code: drop them so "# note\nx = 1" matches "x = 1".
        lines = getattr(node, "leading_lines", None)
        try:
            return _dump_stmts(self.code(node.with_changes(leading_lines=())) if lines else self.text(node))
        except SyntaxError:  # e.g. a bare `return`/`yield` fragment never matches
            return ""

    def may_hold(self, node: cst.CSTNode, idents: frozenset[str]) -> bool:
        """Whether ``node``'s text spells out every one of ``idents`` (see :func:`_idents`)."""
        text = self.text(node)
        return not text.isascii() or all(i in text for i in idents)

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


class _Editor:
    """One edit's hooks into the walk."""

    def __init__(self, ctx: _Ctx) -> None:
        self.ctx = ctx

    def skip(self, node: cst.BaseStatement) -> bool:
        """Whether nothing in ``node`` can concern the edit."""
        return False

    def exprs(self, node: cst.BaseStatement, stack: list[str]) -> cst.BaseStatement:
        """``node`` with its own expressions edited (a compound statement's, not its blocks')."""
        return node

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
    if tuple(inner[:depth]) != ed.ctx.scope[:depth] or ed.skip(node):
        return node  # neither in nor around the scope, or nothing to find there
    if isinstance(node, cst.SimpleStatementLine):
        return ed.exprs(node, stack)
    new = ed.exprs(_suites(node, lambda b: _walk_block(ed, b, inner)), stack)
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


def _find_run(ctx: _Ctx, body: Sequence[cst.CSTNode], want: list[str], kinds: list[tuple[str, ...]]) -> list[int]:
    """Start indexes of the runs of statements in ``body`` whose dumps equal ``want``."""
    n = len(want)
    have = [_kind(s) for s in body]
    return [i for i in range(len(body) - n + 1)
            if have[i : i + n] == kinds and [ctx.stmt_dump(s) for s in body[i : i + n]] == want]


class _StmtEditor(_Editor):
    """Applies a statement-level edit to every statement block inside the scope."""

    def __init__(self, ctx: _Ctx, edit: ReplaceStmt | InsertAfter) -> None:
        super().__init__(ctx)
        self.edit = edit
        self.new_nodes = _stmt_nodes(edit.new)
        self.new_dump = [_dump_stmts(ctx.module.code_for_node(s)) for s in self.new_nodes]
        self.new_kinds = [_kind(s) for s in self.new_nodes]
        old = edit.old if isinstance(edit, ReplaceStmt) else edit.after
        old_nodes = _stmt_nodes(old) if old else []
        self.old_dump = [_dump_stmts(ctx.module.code_for_node(s)) for s in old_nodes]
        self.old_kinds = [_kind(s) for s in old_nodes]
        self.matches = 0
        self.present = 0

    def _edit_body(self, body: list[cst.BaseStatement], stack: list[str], top: bool) -> list[cst.BaseStatement]:
        if not self.ctx.in_scope(stack):
            return body
        self.present += len(_find_run(self.ctx, body, self.new_dump, self.new_kinds))
        if isinstance(self.edit, ReplaceStmt):
            out, i = [], 0
            starts = set(_find_run(self.ctx, body, self.old_dump, self.old_kinds))
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
            points = [i + len(self.old_dump) for i in _find_run(self.ctx, body, self.old_dump, self.old_kinds)]
        elif top:
            already = _find_run(self.ctx, body, self.new_dump, self.new_kinds)
            points = [] if already else [_after_preamble(body, module=not self.ctx.scope)]
            self.matches += bool(already)
        else:
            points = []
        body = list(body)
        for p in reversed(points):
            self.matches += 1
            # The insertion is recognised by its first statement, so a later patch (ordered
            # `after` this one) may rewrite the rest without breaking t(t(x)) == t(x).
            if not _find_run(self.ctx, body[p : p + 1], self.new_dump[:1], self.new_kinds[:1]):
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

    def skip(self, node: cst.BaseStatement) -> bool:
        return not any(self.ctx.may_hold(node, idents) for idents in self.idents)

    def exprs(self, node: cst.BaseStatement, stack: list[str]) -> cst.BaseStatement:
        if not self.ctx.in_scope([*stack, node.name.value] if isinstance(node, _DEFS) else stack):
            return node
        self.stack = list(stack)
        changed = self.changed
        new = node.visit(self)
        return new if self.changed != changed else node  # type: ignore[return-value]

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.CSTNode:
        self.stack.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.CSTNode:
        self.stack.pop()
        return updated


class _ExprEditor(_ExprVisitor):
    def __init__(self, ctx: _Ctx, edit: ReplaceExpr) -> None:
        super().__init__(ctx)
        self.old_dump = _dump_expr(edit.old)
        self.new_dump = _dump_expr(edit.new)
        self.idents = (_idents(edit.old, "eval"), _idents(edit.new, "eval"))
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
        if self.ctx.stmt_dump(original) == self.new_dump:
            return updated
        first = self.new_nodes[0].with_changes(leading_lines=original.leading_lines)  # type: ignore[attr-defined]
        return [first, *self.new_nodes[1:]]


class _KeywordEditor(_ExprVisitor):
    """Adds or removes one keyword argument of every call of a given callee."""

    def __init__(self, ctx: _Ctx, edit: AddKeyword | RemoveKeyword) -> None:
        super().__init__(ctx)
        self.edit = edit
        self.callee = _dump_expr(edit.call)
        self.idents = (_idents(edit.call, "eval"),)
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
