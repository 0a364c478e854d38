"""``strip_debug`` on real speculators 0.3.0 sources instrumented at many places.

The pristine upstream file plays ``expected``; an inserter walks its statement tree and adds
debug output of every supported kind at chosen positions (inside functions, after docstrings,
in loops, in nested blocks, at the end of blocks before ``else``/``except``), and the result
of stripping must be byte-identical to the pristine file.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

import upstream  # noqa: E402

from vllm_compat.strip import Leftover, StripError, strip_debug  # noqa: E402

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"
FILES = (GENERATOR, WORKER)


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    try:
        whl = upstream.wheel("speculators", "0.3.0")
    except (subprocess.CalledProcessError, FileNotFoundError, OSError) as exc:
        pytest.skip(f"speculators 0.3.0 wheel not available: {exc}")
    with zipfile.ZipFile(whl) as zf:
        return {name: zf.read(name).decode("utf-8") for name in FILES}


# ---------------------------------------------------------------------------------------------
# The inserter


@dataclass(frozen=True, order=True)
class Point:
    """A place where a statement may go: before line ``line`` (1-based), at ``indent``."""

    line: int
    indent: str
    module: bool  # a module-level point


def _bodies(node: ast.AST) -> list[list[ast.stmt]]:
    out = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            out.append(value)
    for handler in getattr(node, "handlers", ()):
        out.append(handler.body)
    return out


def insertion_points(source: str) -> list[Point]:
    """Every position before a statement and after the last statement of every block."""
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    points: set[Point] = set()

    def visit(body: list[ast.stmt], module: bool) -> None:
        first = body[0]
        text = lines[first.lineno - 1]
        indent = text[: len(text) - len(text.lstrip())]
        if text[len(indent):].startswith(("elif", "else")) or len(indent) != first.col_offset:
            return  # an elif chain, or a body on its header's line
        for stmt in body:
            start = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            points.add(Point(start, indent, module))
            for inner in _bodies(stmt):
                visit(inner, False)
        points.add(Point(body[-1].end_lineno + 1, indent, module))

    visit(tree.body, True)
    # Never above a docstring (it would stop being the docstring: not a realistic edit).
    docstrings = {
        node.body[0].lineno for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node, clean=False) is not None
    }
    return sorted(p for p in points if p.line not in docstrings)


# Debug snippets: (template lines, needs). ``needs`` names a module import the snippet relies
# on, which the inserter adds too (and the stripper must remove as "made unused").
SNIPPETS: list[tuple[str, str | None]] = [
    ('print("DEBUG here")', None),
    ('print(f"DEBUG {len([1, 2])=}")  # trailing comment', None),
    ('print("DEBUG to stderr", file=sys.stderr)', "sys"),
    ('log.info("DEBUG via log")', None),
    ('logger.debug("DEBUG via logger %s", 1)', None),
    ('self.logger.warning("DEBUG via self.logger")', None),
    ('self._log.error("DEBUG via self._log")', None),
    ('LOGGER.critical("DEBUG")', None),
    ('logging.info("DEBUG via logging")', "logging"),
    ('log.exception("DEBUG")', None),
    ("breakpoint()", None),
    ("import pdb; pdb.set_trace()", None),
    ("import ipdb\nipdb.set_trace()", None),
    ("from pdb import set_trace; set_trace()", None),
    ('__import__("pdb").set_trace()', None),
    ('print(\n    "DEBUG multi-line",\n    [1, 2],\n    sep=", ",\n)', None),
    ('log.debug(\n    "DEBUG multi-line %s",\n    3,\n)', None),
    ('# DEBUG: remove me\nprint("DEBUG with comment")', None),
    ('\nprint("DEBUG between blank lines")\n', None),
    ('print("a"); print("b")', None),
    ('if True:\n    print("DEBUG in an added if")\n    log.debug("DEBUG")', None),
    ('if __debug__:\n    # inspect\n    breakpoint()\nelse:\n    pass', None),
    ("for _dbg in range(3):\n    print(_dbg)", None),
    ('while False:\n    print("never")', None),
    ('try:\n    print("DEBUG in try")\nexcept Exception:\n    log.exception("DEBUG")', None),
    ('with open("/tmp/dbg.txt", "a") as _fh:\n    print("DEBUG", file=_fh)', None),
    ("if True:\n    if True:\n        import pdb; pdb.set_trace()", None),
]


def render(snippet: str, indent: str) -> str:
    return "".join((indent + line if line else "") + "\n" for line in snippet.split("\n"))


def instrument(source: str, chosen: list[tuple[Point, str]], module_points: list[Point]) -> str:
    """``source`` with each snippet inserted at its point (plus the imports it needs)."""
    tree = ast.parse(source)
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    inserts: list[tuple[int, int, str]] = []
    needs = set()
    for n, (point, snippet) in enumerate(chosen):
        inserts.append((point.line, -len(point.indent), n, render(snippet, point.indent)))
        need = dict(SNIPPETS).get(snippet)
        if need and need not in imported:
            needs.add(need)
    for k, need in enumerate(sorted(needs)):
        point = module_points[(7 * k + 3) % len(module_points)]
        inserts.append((point.line, 0, -1 - k, f"import {need}\n"))
    lines = source.splitlines(keepends=True)
    # Same line: deeper blocks first, so a block end never swallows a shallower insertion.
    for line, _, _, text in sorted(inserts, reverse=True):
        lines.insert(line - 1, text)
    out = "".join(lines)
    ast.parse(out)  # the instrumented file must be valid Python
    return out


def instrument_many(source: str, seed: int, count: int) -> tuple[str, list[tuple[Point, str]]]:
    points = insertion_points(source)
    module_points = [p for p in points if p.module]
    chosen = []
    for k in range(count):
        point = points[(seed * 31 + k * 17) % len(points)]
        snippet = SNIPPETS[(seed + k * 5) % len(SNIPPETS)][0]
        chosen.append((point, snippet))
    return instrument(source, chosen, module_points), chosen


def check_restores(current: str, expected: str, again: bool = True):
    result = strip_debug(current, expected)
    assert result.leftovers == ()
    assert result.source == expected  # byte-identical
    assert result.changed == (current != expected)
    if again:
        second = strip_debug(result.source, expected)
        assert second.removed == () and second.source == expected and not second.changed
    return result


# ---------------------------------------------------------------------------------------------
# The real files


def test_inserter_covers_the_interesting_places(sources):
    points = insertion_points(sources[GENERATOR])
    lines = sources[GENERATOR].splitlines()
    assert len(points) > 80
    before = {lines[p.line - 1].strip() for p in points if p.line <= len(lines)}
    assert '"""Create VllmConfig with hidden states worker extension"""' not in before
    # after a docstring, in a loop body, at the end of a try body before "except", in a while
    assert "cache_config = CacheConfig(" in before  # right after the docstring
    assert "except Exception:" in before
    assert "self.executor.execute_model(scheduler_output)" in before
    assert "self.scheduler.add_request(req)" in before


@pytest.mark.parametrize("name", FILES)
def test_every_position_every_snippet_restores_exact_bytes(sources, name):
    expected = sources[name]
    points = insertion_points(expected)
    module_points = [p for p in points if p.module]
    for k, (snippet, _) in enumerate(SNIPPETS):
        # one snippet kind at every position at once
        chosen = [(p, snippet) for p in points]
        current = instrument(expected, chosen, module_points)
        result = check_restores(current, expected)
        assert len(result.removed) >= len(points), snippet
    # and each position alone, cycling through the kinds
    for k, point in enumerate(points):
        snippet = SNIPPETS[k % len(SNIPPETS)][0]
        current = instrument(expected, [(point, snippet)], module_points)
        check_restores(current, expected, again=False)  # idempotence: checked above


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("seed", range(12))
def test_mixed_instrumentation_restores_exact_bytes(sources, name, seed):
    expected = sources[name]
    current, chosen = instrument_many(expected, seed, count=25)
    result = check_restores(current, expected)
    kinds = {r.kind for r in result.removed}
    assert kinds <= {"print", "logging", "breakpoint", "pdb", "import"}
    # every removed statement is reported at its line in the input
    current_lines = current.splitlines()
    for r in result.removed:
        assert r.code.splitlines()[0] in current_lines[r.line - 1], r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hypothesis_instrumentation_restores_exact_bytes(sources, data):
    name = data.draw(st.sampled_from(FILES))
    expected = sources[name]
    points = insertion_points(expected)
    chosen = data.draw(st.lists(
        st.tuples(st.sampled_from(points), st.sampled_from([s for s, _ in SNIPPETS])),
        min_size=1, max_size=12))
    current = instrument(expected, chosen, [p for p in points if p.module])
    check_restores(current, expected)


def test_upstream_log_lines_are_kept_even_when_duplicated(sources):
    expected = sources[GENERATOR]
    upstream_logs = expected.count("log.info(") + expected.count("log.debug(")
    assert upstream_logs >= 10
    line = '        log.info("Initializing executor...")\n'
    assert line in expected
    # the same text added next to the upstream line, and elsewhere
    current = expected.replace(line, line + line, 1)
    current = current.replace('        log.info("Creating scheduler...")\n',
                              line + '        log.info("Creating scheduler...")\n', 1)
    result = check_restores(current, expected)
    assert [r.kind for r in result.removed] == ["logging", "logging"]
    assert result.source.count("log.info(") + result.source.count("log.debug(") == upstream_logs


def test_upstream_prints_are_kept_and_matched_by_position():
    expected = 'print("start")\n\n\ndef f():\n    print("start")\n    return 1\n'
    current = 'print("start")\nprint("start")\n\n\ndef f():\n    print("start")\n' \
              '    print("start")\n    return 1\nprint("start")\n'
    result = check_restores(current, expected)
    assert len(result.removed) == 3


def test_used_print_is_kept_and_reported(sources):
    expected = sources[GENERATOR]
    anchor = "        self._request_counter += 1\n"
    current = expected.replace(
        anchor,
        anchor + "        _n = print(self._request_counter)\n"
        "        print(self._request_counter)\n",
    )
    result = strip_debug(current, expected)
    assert "        _n = print(self._request_counter)\n" in result.source
    assert result.source == expected.replace(
        anchor, anchor + "        _n = print(self._request_counter)\n")
    line = current.splitlines().index("        _n = print(self._request_counter)") + 1
    assert result.leftovers == (Leftover(line, "added: _n = print(self._request_counter)"),)
    assert [r.code for r in result.removed] == ["print(self._request_counter)"]


def test_hand_edit_is_left_alone_and_reported(sources):
    expected = sources[GENERATOR]
    edited = expected.replace("MAX_NUM_SEQS = 32  #", "MAX_NUM_SEQS = 64  #")
    assert edited != expected
    current, _ = instrument_many(edited, seed=3, count=20)
    result = strip_debug(current, expected)
    assert result.source == edited
    line = current.splitlines().index(
        "MAX_NUM_SEQS = 64  # Maximum sequences for prefill-only workload") + 1
    assert result.leftovers == (Leftover(
        line,
        "changed: MAX_NUM_SEQS = 32  # Maximum sequences for prefill-only workload"
        " -> MAX_NUM_SEQS = 64  # Maximum sequences for prefill-only workload"),)
    again = strip_debug(result.source, expected)
    assert again.source == edited and not again.changed
    line = edited.splitlines().index(
        "MAX_NUM_SEQS = 64  # Maximum sequences for prefill-only workload") + 1
    assert again.leftovers == (Leftover(line, result.leftovers[0].summary),)


def test_added_logger_setup_stays_with_its_import(sources):
    expected = sources[GENERATOR]
    anchor = "log = PipelineLogger(__name__)\n"
    current = ("import logging\n" + expected).replace(
        anchor, anchor + "_dbg_logger = logging.getLogger('dbg')\n")
    current = current.replace(
        "        self._setup_capture()\n",
        "        self._setup_capture()\n        logging.info('DEBUG captured')\n")
    result = strip_debug(current, expected)
    assert [r.kind for r in result.removed] == ["logging"]
    assert result.source.startswith("import logging\n")  # still used by the setup line
    assert {lo.summary for lo in result.leftovers} == {
        "added: import logging", "added: _dbg_logger = logging.getLogger('dbg')"}


def test_changed_line_next_to_removed_debug_keeps_its_blank_lines(sources):
    expected = sources[GENERATOR]
    anchor = "log = PipelineLogger(__name__)\n\n\nclass VllmHiddenStatesGenerator:\n"
    assert anchor in expected
    edited = expected.replace(anchor, anchor.replace("__name__", '"speculators"'))
    current = edited.replace(
        "\n\nclass VllmHiddenStatesGenerator:\n",
        "\n\n\nprint('DEBUG')\n\nclass VllmHiddenStatesGenerator:\n")
    result = strip_debug(current, expected)
    assert result.source == edited
    assert [lo.summary for lo in result.leftovers] == [
        'changed: log = PipelineLogger(__name__) -> log = PipelineLogger("speculators")']


def test_deleted_upstream_line_next_to_removed_debug_keeps_the_blank_lines(sources):
    expected = sources[WORKER]
    tail = "\n    return hidden_states\n\n\nclass HiddenStatesWorkerExtension:\n"
    assert tail in expected
    edited = expected.replace(tail, "\n\n\nclass HiddenStatesWorkerExtension:\n")
    current = edited.replace(
        "\nclass HiddenStatesWorkerExtension:\n",
        '\nif True:\n    print("DEBUG")\nclass HiddenStatesWorkerExtension:\n')
    result = strip_debug(current, expected)
    assert result.source == edited
    assert [lo.summary for lo in result.leftovers] == ["removed: return hidden_states"]


def test_edited_upstream_comment_next_to_removed_debug_is_kept(sources):
    expected = sources[GENERATOR]
    old = "        # Get captured states from driver worker\n"
    new = "        # Get captured states from the driver worker (rank 0)\n"
    assert old in expected
    current = expected.replace(old, new + "        print('DEBUG')\n")
    result = strip_debug(current, expected)
    assert result.source == expected.replace(old, new)
    assert [lo.summary for lo in result.leftovers] == [
        f"changed: {old.strip()} -> {new.strip()}"]


def test_edited_upstream_log_line_is_a_leftover_not_debug(sources):
    expected = sources[GENERATOR]
    old = 'log.info("Setting up hidden states capture...")'
    new = 'log.info("Setting up hidden states capture (patched)...")'
    current = expected.replace(old, new)
    result = strip_debug(current, expected)
    assert result.source == current and not result.changed
    assert [lo.summary for lo in result.leftovers] == [f"changed: {old} -> {new}"]


def test_debug_appended_to_an_existing_line(sources):
    expected = sources[WORKER]
    anchor = "        self._captured_states = None  # type: ignore[assignment]\n"
    assert anchor in expected
    current = expected.replace(
        anchor, "        self._captured_states = None; print('reset')  # type: ignore[assignment]\n")
    result = check_restores(current, expected)
    assert [(r.code, r.kind) for r in result.removed] == [("print('reset')", "print")] * 3


def test_added_import_used_by_kept_code_stays(sources):
    expected = sources[WORKER]
    current = expected.replace("import types\n", "import types\nimport sys\n").replace(
        "    return hidden_states\n",
        "    print(sys.argv, file=sys.stderr)\n    sys.stdout.flush()\n    return hidden_states\n")
    result = strip_debug(current, expected)
    assert "import sys\n" in result.source
    assert [r.kind for r in result.removed] == ["print"]
    assert {lo.summary for lo in result.leftovers} == {"added: import sys",
                                                      "added: sys.stdout.flush()"}


def test_crlf_files_keep_their_bytes(sources):
    expected = sources[WORKER].replace("\n", "\r\n")
    current = expected.replace(
        "    aux_hidden_states = []\r\n",
        "    aux_hidden_states = []\r\n    # DEBUG\r\n    print(aux_hidden_states)\r\n")
    check_restores(current, expected)


def test_nothing_to_do_returns_the_input(sources):
    for name in FILES:
        result = strip_debug(sources[name], sources[name])
        assert result.source is sources[name] or result.source == sources[name]
        assert not result.changed and result.removed == () and result.leftovers == ()


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


# ---------------------------------------------------------------------------------------------
# Without expected: a user's own script

USER_SCRIPT = '''\
"""Generate hidden states for my dataset."""
import pdb
import sys

from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator


def main(argv):
    print("args:", argv)
    gen = VllmHiddenStatesGenerator("m", layer_ids=[1, 2])
    for batch in argv:
        print(
            "batch",
            batch,
        )
        if not batch:
            print("empty", file=sys.stderr)
        out = gen.generate([[1, 2, 3]]); print(len(out))
    if argv: breakpoint()
    status = print("done")
    logger.info("kept: logging is not debug output without expected")
    try:
        pdb.set_trace()
    except Exception:
        return print(sys.exc_info())
    return status


if __name__ == "__main__":
    main(sys.argv)
'''

USER_STRIPPED = '''\
"""Generate hidden states for my dataset."""
import sys

from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator


def main(argv):
    gen = VllmHiddenStatesGenerator("m", layer_ids=[1, 2])
    for batch in argv:
        if not batch:
            pass
        out = gen.generate([[1, 2, 3]])
    if argv: pass
    status = print("done")
    logger.info("kept: logging is not debug output without expected")
    try:
        pass
    except Exception:
        return print(sys.exc_info())
    return status


if __name__ == "__main__":
    main(sys.argv)
'''


def test_no_expected_strips_a_user_script():
    result = strip_debug(USER_SCRIPT, None)
    assert result.source == USER_STRIPPED
    assert result.leftovers == ()
    assert [(r.line, r.kind) for r in result.removed] == [
        (2, "pdb"), (9, "print"), (12, "print"), (17, "print"), (18, "print"),
        (19, "breakpoint"), (23, "pdb")]
    assert result.removed[2].code == 'print(\n    "batch",\n    batch,\n)'
    assert result.removed[3].code == 'print("empty", file=sys.stderr)'
    again = strip_debug(result.source, None)
    assert not again.changed and again.source == USER_STRIPPED


@pytest.mark.parametrize(("source", "stripped"), [
    ("x = 1; print(x)\n", "x = 1\n"),
    ("print(x); x = 1\n", "x = 1\n"),
    ("a(); print(1); b()  # note\n", "a(); b()  # note\n"),
    ("a(); print(1);\n", "a();\n"),
    ('s = "é→ü"; print(s); t = "ß"\n', 's = "é→ü"; t = "ß"\n'),
    ("while x: print(x); x -= 1\n", "while x: x -= 1\n"),
    ("class A:\n    print('body')\n", "class A:\n    pass\n"),
    ("def f():\n    print(\n        1,\n    )  # end\n    breakpoint()\n",
     "def f():\n    pass\n"),
    ("try:\n    print(1)\nexcept E:\n    print(2)\nfinally:\n    print(3)\n",
     "try:\n    pass\nexcept E:\n    pass\nfinally:\n    pass\n"),
    ("match v:\n    case 1:\n        print(v)\n    case _:\n        y = 2\n",
     "match v:\n    case 1:\n        pass\n    case _:\n        y = 2\n"),
    ("from ipdb import set_trace as st\nst()\nset_trace()\n", "from ipdb import set_trace as st\nst()\n"),
    ("import pdb\n", ""),
    ("if x:\r\n    print(x)\r\ny = 1\r\n", "if x:\r\n    pass\r\ny = 1\r\n"),
    ("print(1)", ""),
])
def test_no_expected_edits(source, stripped):
    result = strip_debug(source, None)
    assert result.source == stripped
    assert strip_debug(stripped, None).source == stripped


def test_kinds_with_expected():
    expected = "def f(self):\n    return 1\n"
    body = [
        ("print(1)", "print"), ("self.logger.info('x')", "logging"),
        ("self._log.exception('x')", "logging"), ("LOGGER.warning('x')", "logging"),
        ("logging.critical('x')", "logging"), ("breakpoint()", "breakpoint"),
        ("ipdb.set_trace()", "pdb"), ("__import__('pdb').set_trace()", "pdb"),
        ("import pdb", "pdb"),
    ]
    current = "def f(self):\n" + "".join(f"    {code}\n" for code, _ in body) + "    return 1\n"
    result = check_restores(current, expected)
    assert [(r.line, r.code, r.kind) for r in result.removed] == [
        (n + 2, code, kind) for n, (code, kind) in enumerate(body)]
    # not debug output: other receivers, other methods, a logger made on the spot
    not_debug = ["self.info('x')", "log.setLevel(10)", "printer.print(1)",
                 "logging.getLogger(__name__).info('x')", "pprint(1)"]
    current = "def f(self):\n" + "".join(f"    {code}\n" for code in not_debug) + "    return 1\n"
    result = strip_debug(current, expected)
    assert result.source == current and not result.changed
    assert [lo.summary for lo in result.leftovers] == [f"added: {c}" for c in not_debug]


def test_no_expected_keeps_used_prints_unlike_ruff_t201():
    source = "x = print(1)\nf(print(2))\ny = [print(3)]\n\n\ndef g():\n    return print(4)\n"
    result = strip_debug(source, None)
    assert result.source == source and not result.changed


def test_no_expected_keeps_pdb_import_still_in_use():
    source = "import pdb\n\npdb.set_trace()\nhandler = pdb.Pdb\n"
    result = strip_debug(source, None)
    assert result.source == "import pdb\n\nhandler = pdb.Pdb\n"
    assert [r.kind for r in result.removed] == ["pdb"]


def test_no_expected_keeps_logging():
    source = "import logging\nlogging.info('x')\nlog.debug('y')\n"
    assert strip_debug(source, None).source == source


# ---------------------------------------------------------------------------------------------
# Errors


def test_syntax_error_in_current_names_the_line(sources):
    broken = sources[WORKER].replace("    aux_hidden_states = []\n",
                                     "    aux_hidden_states = [\n", 1)
    line = sources[WORKER].splitlines().index("    aux_hidden_states = []") + 1
    with pytest.raises(StripError) as info:
        strip_debug(broken, sources[WORKER])
    assert isinstance(info.value, ValueError)
    assert info.value.line >= line
    assert f"line {info.value.line}" in str(info.value)
    assert "current" in str(info.value)


def test_syntax_error_in_expected_is_reported_too():
    with pytest.raises(StripError, match="expected source has a syntax error at line 2"):
        strip_debug("x = 1\n", "x = 1\ndef (\n")


def test_syntax_error_without_expected():
    with pytest.raises(StripError, match="line 3"):
        strip_debug("a = 1\nb = 2\nprint(\n", None)
