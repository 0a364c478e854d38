"""``strip_debug`` on real speculators 0.3.0 sources instrumented at many places.

The pristine upstream file plays ``expected``; an inserter walks its statement tree and adds
debug output of every supported kind at chosen positions (inside functions, after docstrings,
in loops, in nested blocks, at the end of blocks before ``else``/``except``), and the result
of stripping must be byte-identical to the pristine file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stripkit import (FILES, GENERATOR, SNIPPETS, WORKER, check_restores, insertion_points,  # noqa: E402
                      instrument, instrument_many, load_sources)

from vllm_compat.strip import Leftover, StripError, strip_debug  # noqa: E402


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return load_sources()


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
