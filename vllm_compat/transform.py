"""Carrying out a patch's edits on source text with libcst (the only module that imports it).

Code is matched by its AST (``ast.dump`` without positions), so the target's formatting and
comments do not matter, while libcst keeps every byte of the file that is not edited.  Each
edit is a fixed point: where its result is already present it changes nothing.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Sequence
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


@dataclass
class _Ctx:
    module: cst.Module
    scope: tuple[str, ...]
    # id(node) -> (node, dump); holding the node keeps its id from being reused by a new node.
    _cache: dict[int, tuple[cst.CSTNode, str]]

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def stmt_dump(self, node: cst.CSTNode) -> str:
        hit = self._cache.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        # Leading comments are not code: drop them so "# note\nx = 1" matches "x = 1".
        bare = node.with_changes(leading_lines=()) if hasattr(node, "leading_lines") else node
        try:
            dump = _dump_stmts(self.code(bare))
        except SyntaxError:  # e.g. a bare `return`/`yield` fragment never matches
            dump = ""
        self._cache[id(node)] = (node, dump)
        return dump


class _ScopedTransformer(cst.CSTTransformer):
    """Tracks the dotted qualified name of the def/class being visited."""

    def __init__(self, ctx: _Ctx) -> None:
        super().__init__()
        self.ctx = ctx
        self.stack: list[str] = []

    def in_scope(self) -> bool:
        return tuple(self.stack[: len(self.ctx.scope)]) == self.ctx.scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.CSTNode:
        self.stack.pop()
        return self.leave_def(original, updated)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.CSTNode:
        self.stack.pop()
        return self.leave_def(original, updated)

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        return updated


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


class _StmtEditor(_ScopedTransformer):
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

    def _edit_body(self, body: Sequence[cst.CSTNode], top: bool) -> list[cst.CSTNode]:
        body = list(body)
        if not self.in_scope():
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
        for p in reversed(points):
            self.matches += 1
            # The insertion is recognised by its first statement, so a later patch (ordered
            # `after` this one) may rewrite the rest without breaking t(t(x)) == t(x).
            if not _find_run(self.ctx, body[p : p + 1], self.new_dump[:1], self.new_kinds[:1]):
                body[p:p] = self.new_nodes
        return body

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.CSTNode:
        if not self.old_dump and isinstance(self.edit, InsertAfter):
            return updated  # preamble insertion happens once, on the scope's own body
        return updated.with_changes(body=self._edit_body(updated.body, top=False))

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        name = original.name.value  # type: ignore[attr-defined]
        if self.old_dump or not isinstance(self.edit, InsertAfter) or (*self.stack, name) != self.ctx.scope:
            return updated
        self.stack.append(name)  # the body belongs to the scope
        block = updated.body  # type: ignore[attr-defined]
        new = block.with_changes(body=self._edit_body(block.body, top=True))
        self.stack.pop()
        return updated.with_changes(body=new)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        if self.ctx.scope and not self.old_dump:
            return updated
        return updated.with_changes(body=self._edit_body(updated.body, top=not self.ctx.scope))


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


class _ExprEditor(_ScopedTransformer):
    def __init__(self, ctx: _Ctx, edit: ReplaceExpr) -> None:
        super().__init__(ctx)
        self.old_dump = _dump_expr(edit.old)
        self.new_dump = _dump_expr(edit.new)
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
            return self.new_node.with_changes(
                lpar=getattr(original, "lpar", ()), rpar=getattr(original, "rpar", ())
            ) if hasattr(self.new_node, "lpar") else self.new_node
        return result


class _DefReplacer(_ScopedTransformer):
    def __init__(self, ctx: _Ctx, edit: ReplaceDef) -> None:
        super().__init__(ctx)
        self.new_nodes = _stmt_nodes(edit.new)
        self.new_dump = _dump_stmts(edit.new)
        self.found = 0

    def leave_def(self, original: cst.CSTNode, updated: cst.CSTNode):
        if tuple(self.stack) + (original.name.value,) != self.ctx.scope:  # type: ignore[attr-defined]
            return updated
        self.found += 1
        if self.ctx.stmt_dump(original) == self.new_dump:
            return updated
        first = self.new_nodes[0].with_changes(leading_lines=original.leading_lines)  # type: ignore[attr-defined]
        return cst.FlattenSentinel([first, *self.new_nodes[1:]])


class _KeywordEditor(_ScopedTransformer):
    """Adds or removes one keyword argument of every call of a given callee."""

    def __init__(self, ctx: _Ctx, edit: AddKeyword | RemoveKeyword) -> None:
        super().__init__(ctx)
        self.edit = edit
        self.callee = _dump_expr(edit.call)
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
        return updated.with_changes(args=args)


def _visit(module: cst.Module, scope: tuple[str, ...], transformer: _ScopedTransformer) -> cst.Module:
    """``module.visit(transformer)``, traversing only the subtree of the def/class named by
    ``scope`` (a whole-module traversal per edit was most of apply's time)."""
    nodes: list[cst.CSTNode] = [module]
    chain: list[int] = []
    body: Sequence[cst.CSTNode] = module.body
    for name in scope:
        index = next((i for i, n in enumerate(body)
                      if isinstance(n, (cst.ClassDef, cst.FunctionDef)) and n.name.value == name), None)
        if index is None or not isinstance(body[index].body, cst.IndentedBlock):  # type: ignore[union-attr]
            return module.visit(transformer)  # let the edit report what it cannot find
        chain.append(index)
        nodes.append(body[index])
        body = body[index].body.body  # type: ignore[union-attr]
    if not scope:
        return module.visit(transformer)
    transformer.stack = list(scope[:-1])
    new: object = nodes[-1].visit(transformer)
    for parent, index in zip(reversed(nodes[:-1]), reversed(chain)):
        replacement = list(new.nodes) if isinstance(new, cst.FlattenSentinel) else [new]
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
