"""Issue "strip-debug", done-when: on a site built from real wheels, apply -> add debug lines
-> `vllm-compat strip-debug` -> files byte-identical to the patched ones and `verify` exit 0."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import enginekit as kit

GEN = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"


def _instrument(path: Path) -> None:
    """Debug output of every kind, at several depths, as someone tracing tensors would add."""
    text = path.read_text()
    starts = {n.lineno for n in ast.walk(ast.parse(text)) if isinstance(n, ast.stmt)}
    out = []
    for no, line in enumerate(text.splitlines(keepends=True), 1):
        out.append(line)
        if no not in starts:  # e.g. text inside a docstring that looks like code
            continue
        body = line.strip()
        ind = line[: len(line) - len(line.lstrip())]
        if body.startswith("def ") and body.endswith(":"):
            out.append(f"{ind}    print('DEBUG enter', {body[4:body.index('(')]!r})\n")
        elif body.startswith(("for ", "while ")) and body.endswith(":"):
            out.append(f"{ind}    logger.info('DEBUG loop')\n" if "worker" in path.name else f"{ind}    log.info('DEBUG loop')\n")
            out.append(f"{ind}    import pdb; pdb.set_trace()\n")
        elif body.startswith("return "):
            out.insert(len(out) - 1, f"{ind}breakpoint()\n")
    path.write_text("".join(out))


def test_apply_instrument_strip_verify(full_site: Path) -> None:
    assert kit.cli(full_site, "apply").returncode == 0
    patched = {rel: (full_site / rel).read_bytes() for rel in (GEN, WORKER)}
    for rel in patched:
        _instrument(full_site / rel)
    drifted = kit.cli(full_site, "verify")
    assert drifted.returncode == 11, kit.show(drifted)

    before = kit.snapshot(full_site)
    dry = kit.cli(full_site, "strip-debug", "--dry-run")
    assert dry.returncode == 0, kit.show(dry)
    assert re.search(r"^-\s+print\('DEBUG enter'", dry.stdout, re.M) and "dry run: nothing written" in dry.stdout
    assert kit.snapshot_diff(before, kit.snapshot(full_site)) == []

    res = kit.cli(full_site, "strip-debug")
    assert res.returncode == 0, kit.show(res)
    for rel, data in patched.items():
        assert (full_site / rel).read_bytes() == data, f"{rel} is not byte-identical to the patched file"
    ok = kit.cli(full_site, "verify")
    assert ok.returncode == 0, kit.show(ok)
    again = kit.cli(full_site, "strip-debug")
    assert "removed 0 debug statement(s)" in again.stdout and "removed 1" not in again.stdout


def test_user_script_mode_keeps_used_print(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import pdb\n\ndef f(x):\n    print(x)\n    y = print('kept')\n    breakpoint()\n    return y\n")
    res = kit.cli(None, "strip-debug", str(script))
    assert res.returncode == 0, kit.show(res)
    assert script.read_text() == "def f(x):\n    y = print('kept')\n    return y\n" or \
        script.read_text() == "\ndef f(x):\n    y = print('kept')\n    return y\n", script.read_text()
