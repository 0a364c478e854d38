"""The editors of expressions: replace an expression, add or remove a call's keyword argument.
libcst visits only the statements whose words hold the code sought."""

from __future__ import annotations

import textwrap

import libcst as cst

from ..catalog.patch import AddKeyword, RemoveKeyword, ReplaceExpr
from .match import _Ctx, _dump_expr, _expr_idents
from .suites import _DEFS
from .walk import _Editor


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
