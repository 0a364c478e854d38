"""Each edit kind on small synthetic sources: result, fixed point, formatting kept, errors."""

import pytest

from vllm_compat.patch import AddKeyword, InsertAfter, RemoveKeyword, ReplaceDef, ReplaceExpr, ReplaceStmt
from vllm_compat.transform import TransformError, apply_edits

SRC = '''"""Module."""
import os

X = 1  # keep this comment


class Gen:
    def run(self, ids):
        """Doc."""
        out = self.rpc("get", unique_reply_rank=0)
        states = out[0]
        while ids:
            # step
            self.execute(ids)
        req = Request(
            request_id="r",
            eos_token_id=self.tok.eos,
            arrival_time=0.0,
        )
        return states
'''


def run(*edits):
    out = apply_edits(SRC, [("p", e) for e in edits])
    assert apply_edits(out, [("p", e) for e in edits]) == out, "not a fixed point"
    return out


def test_replace_stmt_matches_by_ast_and_keeps_comments() -> None:
    out = run(ReplaceStmt("f", "Gen.run", old="self.execute( ids )", new="o = self.execute(ids)\nif o is None:\n    self.sample(None)"))
    assert "            # step\n            o = self.execute(ids)\n            if o is None:\n                self.sample(None)\n" in out
    assert "X = 1  # keep this comment" in out


def test_replace_expr_and_wrapping_is_a_fixed_point() -> None:
    out = run(ReplaceExpr("f", "Gen.run", old="out[0]", new="out"))
    assert "states = out\n" in out
    out = run(ReplaceExpr("f", "Gen.run", old="self.rpc('get', unique_reply_rank=0)", new="single(self.rpc('get', unique_reply_rank=0))"))
    assert out.count("single(") == 1


def test_keywords() -> None:
    out = run(RemoveKeyword("f", "Gen.run", call="Request", keyword="eos_token_id"),
              AddKeyword("f", "Gen.run", call="Request", keyword="block_hasher", value="None"))
    assert "eos_token_id" not in out
    assert '            arrival_time=0.0,\n            block_hasher=None,\n        )' in out


def test_insert_after_preamble_and_anchor() -> None:
    out = run(InsertAfter("f", "", after="", new="import sys"),
              InsertAfter("f", "Gen.run", after="", new="assert ids"),
              InsertAfter("f", "Gen.run", after="states = out[0]", new="log(states)"))
    assert out.startswith('"""Module."""\nimport os\nimport sys\n')
    assert '"""Doc."""\n        assert ids\n' in out
    assert "states = out[0]\n        log(states)\n" in out
    assert out.count("assert ids") == 1


def test_replace_def() -> None:
    out = run(ReplaceDef("f", "Gen.run", new="def run(self, ids):\n    return ids"),
              ReplaceDef("f", "Gen.extra", new="def extra(self):\n    return 1", create=True))
    assert "def run(self, ids):\n        return ids" in out and "def extra(self):" in out


@pytest.mark.parametrize(
    "edit",
    [
        ReplaceStmt("f", "Gen.run", old="missing()", new="x()"),
        ReplaceExpr("f", "Gen.run", old="nope[1]", new="nope"),
        AddKeyword("f", "Gen.run", call="Absent", keyword="k", value="1"),
        ReplaceDef("f", "Gen.absent", new="def absent(self):\n    pass"),
        ReplaceStmt("f", "Other.run", old="states = out[0]", new="states = out"),  # wrong scope
    ],
)
def test_missing_anchor_is_an_error(edit) -> None:
    with pytest.raises(TransformError):
        apply_edits(SRC, [("p", edit)])


def test_target_with_syntax_error() -> None:
    with pytest.raises(TransformError, match="does not parse"):
        apply_edits("def f(:\n", [])
