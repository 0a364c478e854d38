"""Carrying out a patch's edits on source text with libcst (the only package that imports it).

Code is matched by its AST (``ast.dump`` without positions), so the target's formatting and
comments do not matter, while libcst keeps every byte of the file that is not edited.  Each
edit is a fixed point: where its result is already present it changes nothing.

An edit is one walk over the statements of its scope (:mod:`.walk`) by an editor:
:mod:`.statements` for statements and defs, :mod:`.expressions` for expressions and keyword
arguments; :mod:`.match` says where the code sought is, cheaply.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

import libcst as cst

from ..catalog.patch import AddKeyword, Edit, InsertAfter, Patch, RemoveKeyword, ReplaceDef, ReplaceExpr, ReplaceStmt
from .expressions import _ExprEditor, _KeywordEditor
from .match import _Ctx
from .statements import _DefReplacer, _StmtEditor
from .walk import _visit

__all__ = ["TransformError", "apply_edits", "transform_file"]


class TransformError(Exception):
    """An edit could not be carried out: its anchor is missing or the result is invalid."""

    def __init__(self, patch_id: str, file: str, message: str) -> None:
        super().__init__(f"{patch_id}: {file}: {message}")
        self.patch_id = patch_id
        self.file = file
        self.message = message


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
            if t3.present:  # a later patch rewrote the anchor; the insertion is there: a fixed point
                return module
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
