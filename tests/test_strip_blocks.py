"""``strip_debug`` where a block would become empty: ``pass`` is put in, and an added
``else``/``elif``/``finally`` clause holding only debug output goes whole."""

from __future__ import annotations

import ast

import pytest
from stripkit import FILES, check_restores, load_sources, render

from vllm_compat.strip import strip_debug


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return load_sources()


# ---------------------------------------------------------------------------------------------
# Blocks that would become empty


def test_block_left_empty_gets_pass():
    expected = "def f(x):\n    if x:\n        pass\n    return x\n"
    current = "def f(x):\n    if x:\n        print(x)\n    return x\n"
    result = check_restores(current, expected)
    assert [r.code for r in result.removed] == ["print(x)"]


def test_added_else_with_only_debug_is_removed_whole():
    expected = "def f(x):\n    if x:\n        return 1\n    return x\n"
    current = ("def f(x):\n    if x:\n        return 1\n    else:\n        print(x)\n"
               "    return x\n")
    check_restores(current, expected)
    # without expected nothing says the else was added: it keeps a valid body
    result = strip_debug(current, None)
    assert result.source == ("def f(x):\n    if x:\n        return 1\n    else:\n        pass\n"
                             "    return x\n")


def test_upstream_else_keeps_pass_when_its_body_was_replaced_by_debug():
    expected = "for i in x:\n    f(i)\nelse:\n    pass\n"
    current = "for i in x:\n    f(i)\nelse:\n    print(i)\n"
    check_restores(current, expected)


def clause_points(source: str) -> list[tuple[int, str, str]]:
    """Where an ``else:``/``elif``/``finally:`` clause can be appended: (line, indent, word)."""
    lines = source.splitlines(keepends=True)
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.If, ast.For, ast.While, ast.Try)) or node.orelse:
            continue
        text = lines[node.lineno - 1]
        indent = text[: len(text) - len(text.lstrip())]
        if len(indent) != node.col_offset:
            continue  # an elif: its clauses belong to the chain
        words = ["else"]
        if isinstance(node, ast.If):
            words.append("elif")
        if isinstance(node, ast.Try):
            words = ["else"] if node.finalbody else ["else", "finally"]
        out.extend((node.end_lineno + 1, indent, w) for w in words)
    return out


CLAUSES = {
    "else": 'else:\n    # DEBUG\n    print("DEBUG in an added else")',
    "elif": 'elif __debug__:\n    log.debug("DEBUG in an added elif")\n'
            'else:\n    breakpoint()',
    "finally": 'finally:\n    import pdb; pdb.set_trace()',
}


@pytest.mark.parametrize("name", FILES)
def test_added_else_elif_finally_clauses_restore_exact_bytes(sources, name):
    expected = sources[name]
    points = clause_points(expected)
    assert len(points) >= 5
    words = {w for _, _, w in points}
    assert words >= {"else", "elif"}
    lines = expected.splitlines(keepends=True)
    stmts: dict[tuple[int, str], list[str]] = {}
    for line, indent, word in points:
        stmts.setdefault((line, indent), []).append(word)

    def pick(n: int, words: list[str]) -> list[str]:
        if "finally" in words:
            return ["else", "finally"]  # in this order
        return ["elif"] if "elif" in words and n % 2 else ["else"]

    # every statement at once, then every single clause alone
    selections = [{key: pick(n, words) for n, (key, words) in enumerate(stmts.items())}]
    selections += [{key: [w]} for key, words in stmts.items() for w in words]
    for selection in selections:
        out = list(lines)
        # bottom-up; at one line the deeper statement's clause goes first
        for (line, indent) in sorted(selection, key=lambda k: (k[0], -len(k[1])), reverse=True):
            block = "".join(render(CLAUSES[w], indent) for w in selection[(line, indent)])
            out.insert(line - 1, block)
        current = "".join(out)
        ast.parse(current)
        check_restores(current, expected)


def test_partially_added_compound_keeps_its_real_code():
    expected = "def f(x):\n    return x\n"
    current = "def f(x):\n    if x:\n        y = 1\n        print(y)\n    return x\n"
    result = strip_debug(current, expected)
    assert result.source == "def f(x):\n    if x:\n        y = 1\n    return x\n"
    assert [lo.summary for lo in result.leftovers] == ["added: if x:", "added: y = 1"]
