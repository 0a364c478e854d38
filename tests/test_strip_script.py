"""``strip_debug`` without ``expected`` (a user's own script): bare prints, breakpoints and
pdb go, logging stays; and the kinds of what is removed with ``expected``."""

from __future__ import annotations

import pytest
from stripkit import check_restores

from vllm_compat.strip import strip_debug


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
