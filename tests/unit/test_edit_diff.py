"""A hand edit as the engine's edits (`vllm_compat.record.edits`): carried out by the real
transform, the edits give the edited bytes (or the same AST, with the difference stated)."""

from __future__ import annotations

import ast
import random
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from vllm_compat.record.edits import RecordError, record_edits
from vllm_compat.patch import AddKeyword, InsertAfter, RemoveKeyword, ReplaceDef, ReplaceExpr, ReplaceStmt
from vllm_compat.transform import apply_edits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import upstream  # noqa: E402

F = "pkg/mod.py"
BASE = textwrap.dedent('''\
    """A module."""

    import os


    def f(x, y=7):
        """Doc."""
        a = g(x, k=1)
        if a:
            b = a + 1
        else:
            b = 0
        try:
            c = h(b)
        except ValueError:
            c = None
        return c


    class C:
        n = 16

        def m(self):
            for i in range(self.n):
                self.run(i, flag=True)
            return self.n
''')


def carried_out(base: str, edited: str) -> tuple[str, object]:
    rec = record_edits(F, base, edited)
    out = apply_edits(base, [("t", e) for e in rec.edits], F)
    if rec.difference:
        assert out != edited and ast.dump(ast.parse(out)) == ast.dump(ast.parse(edited)), rec.difference
    else:
        assert out == edited
    # a fixed point on its own result
    assert apply_edits(out, [("t", e) for e in rec.edits], F) == out
    return out, rec


@pytest.mark.parametrize(("old", "new", "kind"), [
    ("self.run(i, flag=True)", "self.run(i, flag=True, n=2)", AddKeyword),
    ("self.run(i, flag=True)", "self.run(i)", RemoveKeyword),
    ("n = 16", "n = 32", ReplaceExpr),
    ("        b = 0\n", "        b = -1  # none\n", ReplaceStmt),
    ("    return c\n", "    log(c)\n    return c\n", InsertAfter),
    ("    a = g(x, k=1)\n", "    a = g(x, k=1)\n    z = 3\n", InsertAfter),
    ("    except ValueError:\n", "    except KeyError:\n", ReplaceExpr),
    ("def f(x, y=7):", "def f(x, y=8):", ReplaceExpr),
])
def test_each_change_takes_a_fine_form(old: str, new: str, kind: type) -> None:
    edited = BASE.replace(old, new, 1)
    assert edited != BASE
    _, rec = carried_out(BASE, edited)
    assert [type(e) for e in rec.edits] == [kind], rec.edits
    assert not rec.difference


def test_an_insertion_with_a_comment_inserts_then_puts_the_comment_back() -> None:
    edited = BASE.replace("    a = g(x, k=1)\n", "    a = g(x, k=1)\n    # why\n    z = 3\n")
    _, rec = carried_out(BASE, edited)
    assert [type(e) for e in rec.edits] == [InsertAfter, ReplaceStmt] and not rec.difference
    assert rec.edits[1].old == rec.edits[1].new == "a = g(x, k=1)\n# why\nz = 3"


def test_a_changed_header_of_a_def_replaces_it_whole_with_what_it_had() -> None:
    edited = BASE.replace("    def m(self):", "    @staticmethod\n    def m(self):")
    _, rec = carried_out(BASE, edited)
    # the def is replaced as a statement: `old` guards against a def another patch changed
    assert [type(e) for e in rec.edits] == [ReplaceStmt] and "def m(self)" in rec.edits[0].old


def test_several_changes_in_several_scopes() -> None:
    edited = BASE.replace("a = g(x, k=1)", "a = g(x, k=2)").replace("n = 16", "n = 8").replace(
        "            return self.n\n", "            return self.n\n\n        def extra(self):\n            return 0\n")
    carried_out(BASE, edited)


def test_comment_in_the_module_header_is_stated_not_kept() -> None:
    out, rec = carried_out(BASE, "# local tweak\n" + BASE)
    assert rec.difference and "# local tweak" in rec.difference and out == BASE


def test_an_edit_that_does_not_parse_is_refused() -> None:
    with pytest.raises(RecordError, match="does not parse"):
        record_edits(F, BASE, BASE.replace("return c", "return c)"))


def test_a_new_function_at_the_end_of_the_module() -> None:
    # after a short class: inserted, then its blank lines put back with the class as context
    _, rec = carried_out(BASE, BASE + "\n\ndef helper():\n    return 1\n")
    assert [type(e) for e in rec.edits] == [InsertAfter, ReplaceStmt] and not rec.difference
    # after a long one (no context: the patch would hold all of it): created, without the
    # blank lines the transform cannot insert, and that is stated
    long = BASE + "\n\nclass D:\n" + "".join(f"    a{i} = {i}\n" for i in range(20))
    _, rec = carried_out(long, long + "\n\ndef helper():\n    return 1\n")
    assert [type(e) for e in rec.edits] == [ReplaceDef] and rec.edits[0].create
    assert rec.difference and "-\n-\n def helper():" in rec.difference


class _Mutate(cst.CSTTransformer):
    """Changes the block around the ``k``-th simple statement of a module."""

    def __init__(self, k: int, how: str) -> None:
        self.k, self.how, self.seen, self.target = k, how, 0, None

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if self.seen == self.k:
            self.target = node
        self.seen += 1

    def _body(self, original, body):
        i = next((i for i, s in enumerate(original) if s is self.target), None)
        if i is None:
            return body
        s = body[i]
        marker = cst.parse_statement("recorded_marker = 1\n")
        if self.how == "delete" and len(body) > 1:
            return [*body[:i], *body[i + 1 :]]
        if self.how == "insert_after":
            return [*body[: i + 1], marker, *body[i + 1 :]]
        if self.how == "insert_before_commented":
            note = marker.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment("# recorded"))])
            return [*body[:i], note, *body[i:]]
        if self.how == "duplicate":
            return [*body[: i + 1], s.with_changes(leading_lines=()), *body[i + 1 :]]
        if self.how == "trailing_comment":
            ws = cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment("# recorded"))
            return [*body[:i], s.with_changes(trailing_whitespace=ws), *body[i + 1 :]]
        return body

    def leave_IndentedBlock(self, original, updated):
        return updated.with_changes(body=self._body(original.body, list(updated.body)))

    def leave_Module(self, original, updated):
        return updated.with_changes(body=self._body(original.body, list(updated.body)))


def _real_files() -> list[tuple[str, str]]:
    tree = upstream.source_tree(upstream.wheel("speculators", "0.3.0"))
    return sorted((str(p.relative_to(tree)), p.read_text()) for p in (tree / "speculators").rglob("*.py")
                  if p.stat().st_size > 2000)


@pytest.mark.parametrize("seed", range(24))
def test_random_edits_of_real_files_are_carried_out(seed: int) -> None:
    """Statement-level hand edits anywhere in speculators 0.3.0's files (deletions,
    insertions with and without a comment, duplicates, trailing comments)."""
    rng = random.Random(seed)
    rel, base = rng.choice(_real_files())
    module = cst.parse_module(base)
    count = len(_walk_simple(module))
    edited = base
    for _ in range(rng.choice((1, 2, 3))):
        how = rng.choice(("delete", "insert_after", "insert_before_commented", "duplicate", "trailing_comment"))
        edited = cst.parse_module(edited).visit(_Mutate(rng.randrange(count), how)).code
    if edited == base:
        pytest.skip("the mutation changed nothing")
    rec = record_edits(rel, base, edited)
    out = apply_edits(base, [("t", e) for e in rec.edits], rel)
    assert out == edited or (rec.difference and ast.dump(ast.parse(out)) == ast.dump(ast.parse(edited))), rel


def _walk_simple(module: cst.Module):
    class V(cst.CSTVisitor):
        def __init__(self) -> None:
            self.found = []

        def visit_SimpleStatementLine(self, node) -> None:
            self.found.append(node)

    v = V()
    module.visit(v)
    return v.found
