"""Every command the README shows runs in a test, so the README cannot rot.

The ``bash`` blocks are read from README.md itself: each ``vllm-compat`` block runs here, command
by command as written, in bash after the README's own activation line (``source
.venv/bin/activate``) with no other ``vllm-compat`` or ``eagle3`` on the PATH (and
``--site-packages`` pointing at a site built from the real speculators 0.3.0 and vLLM 0.32.0
wheels); ``eagle3 run --example-config`` runs here the same way; the rest names the test that
runs it, and that test must run it. The step table's commands are parsed by ``eagle3``'s own
parser, so a renamed option fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import enginekit as kit
from enginekit import GENERATOR, cli, show
from test_record import hand_edit, project

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()

# Commands run by other tests (or by CI itself), and the text that shows the test runs them.
ELSEWHERE = {
    "scripts/test": (".ci/run", "exec scripts/test"),
    "eagle3 run --tiny --workdir runs/tiny": ("tests/runner/test_acceptance_e2e.py", '"run", "--tiny"'),
    "vllm-compat check --against vllm==0.34.0": ("tests/engine/test_against.py", '"--against", "vllm==0.34.0"'),
    "vllm-compat prove": ("tests/engine/test_proof.py", '"prove"'),
}


def bash_blocks() -> list[list[list[str]]]:
    """Each ```bash block of the README as its commands (argv lists; comments dropped)."""
    blocks = []
    for body in re.findall(r"```bash\n(.*?)```", README, re.S):
        cmds = [shlex.split(line, comments=True) for line in body.splitlines()]
        blocks.append([c for c in cmds if c])
    return blocks


def activation() -> str:
    """The README's one line that puts the commands on the PATH."""
    found = [c for b in bash_blocks() for c in b if c[0] == "source"]
    assert len(found) == 1, f"one README line activates .venv, found {found}"
    return shlex.join(found[0])


def path_without_the_tools() -> str:
    """PATH less every folder holding a ``vllm-compat`` or ``eagle3``: only the activation adds them."""
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not any((Path(d) / t).exists() for t in ("vllm-compat", "eagle3")))


def as_written(argv: list[str], site: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A README command run in bash as a user runs it: activation first, then the words as shown
    (``--site-packages SITE`` after the subcommand when a test site is given)."""
    words = [*argv[:2], "--site-packages", str(site), *argv[2:]] if site is not None else list(argv)
    line = (f"cd {shlex.quote(str(REPO))} && {activation()} && cd {shlex.quote(str(cwd or REPO))} && "
            f"{shlex.join(words)}")
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300,
                          env=kit.env(PATH=path_without_the_tools()))


def test_the_commands_are_reachable_only_through_the_activation():
    bare = subprocess.run(["bash", "-c", "command -v vllm-compat || command -v eagle3"], capture_output=True,
                          text=True, env=kit.env(PATH=path_without_the_tools()))
    assert bare.returncode != 0, bare.stdout  # without it: "command not found", as the issue met it
    for tool in ("vllm-compat", "eagle3"):
        p = as_written([tool, "--help"])
        assert p.returncode == 0 and "usage:" in p.stdout, show(p)


def block_with(word: str) -> list[list[str]]:
    found = [b for b in bash_blocks() if any(c[:2] == ["vllm-compat", word] for c in b)]
    assert len(found) == 1, f"one README block runs `vllm-compat {word}`"
    return found[0]


def run_block(block: list[list[str]], site: Path, cwd: Path | None = None) -> list[subprocess.CompletedProcess]:
    out = []
    for argv in block:
        assert argv[0] == "vllm-compat", argv
        out.append(as_written(argv, site, cwd))
    return out


def test_every_command_shown_is_run_by_a_test():
    here = {("vllm-compat", "status"), ("vllm-compat", "record"), ("vllm-compat", "strip-debug"),
            ("eagle3", "run", "--example-config")}
    for block in bash_blocks():
        for argv in block:
            line = " ".join(argv)
            if argv[0] == "source":  # the activation: every command here runs after it
                assert line == activation()
            elif line in ELSEWHERE:
                path, proof = ELSEWHERE[line]
                assert proof in (REPO / path).read_text(), f"{path} does not run `{line}`"
            elif line == "scripts/demo":  # its commands: each shown in the README and run here
                demo = (REPO / "scripts" / "demo").read_text()
                for cmd in re.findall(r"\$V/((?:vllm-compat|eagle3) [^\n]*)", demo):
                    shown = cmd.split(" ")[:2]
                    assert any(c[:2] == shown for b in bash_blocks() for c in b), cmd
            else:
                assert argv[0] in ("vllm-compat", "eagle3"), f"README command no test runs: {line}"
                assert tuple(argv[:2]) in here or tuple(argv[:3]) in here or \
                    any(argv in b for b in (block_with("status"), block_with("record"), block_with("strip-debug"))), line


def test_the_everyday_loop_as_written(full_site):
    block = block_with("status")
    assert [c[1] for c in block] == ["status", "apply", "verify", "check", "revert"]
    res = run_block(block, full_site)
    assert res[0].returncode == 10 and "pending" in res[0].stdout, show(res[0])  # as its comment says
    for r in res[1:]:
        assert r.returncode == 0, show(r)
    assert kit.all_record_exact(full_site) == []  # revert: the wheel's bytes


def test_record_as_written(tmp_path, pristine_full):
    site = kit.copy_site(pristine_full, tmp_path / "site-packages")
    assert cli(site, "apply").returncode == 0
    repo = project(tmp_path)
    gen = site / GENERATOR
    gen.write_text(hand_edit(gen.read_text()))
    block = block_with("record")
    res = run_block(block, site, cwd=repo)
    for r in res:
        assert r.returncode == 0, show(r)
    name = block[0][2]
    assert (repo / "vllm_fixes" / f"{name}.py").exists()
    assert "still TODO" in res[1].stdout, show(res[1])  # the note the README promises


def test_strip_debug_as_written(full_site):
    assert cli(full_site, "apply").returncode == 0
    gen = full_site / GENERATOR
    patched = gen.read_bytes()
    text = gen.read_text()
    anchor = "        self._setup_capture()\n"
    gen.write_text(text.replace(anchor, anchor + "        print('DEBUG capture', self.layer_ids)\n", 1))
    dry, real = run_block(block_with("strip-debug"), full_site)
    assert dry.returncode == 0 and "DEBUG capture" in dry.stdout, show(dry)
    assert real.returncode == 0, show(real)
    assert gen.read_bytes() == patched
    assert cli(full_site, "verify").returncode == 0


def test_example_config_as_written(tmp_path):
    argv = next(c for b in bash_blocks() for c in b if c[:3] == ["eagle3", "run", "--example-config"])
    p = as_written(argv)
    assert p.returncode == 0, show(p)
    import tomllib

    assert {"prepare", "extract", "train"} <= set(tomllib.loads(p.stdout))


def _concrete(cmd: str) -> list[str]:
    """A step-table command with its placeholders filled and the first of each `a|b` choice."""
    cmd = cmd.replace("\\|", "|").replace("[", "").replace("]", "")
    argv = []
    for word in shlex.split(cmd):
        word = word.split("|")[0]
        argv.append({"N": "8", "a,b,c,d": "2,4,6,8"}.get(word, word))
    return argv


@pytest.mark.parametrize("cmd", re.findall(r"^\| \w[\w-]* \| `(eagle3 [^`]+)`", README, re.M))
def test_step_table_commands_parse(cmd):
    from eagle3_runner.cli import _parser

    argv = _concrete(cmd)
    try:
        _parser().parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"`{cmd}` does not parse ({exc})")
    runner_tests = "".join(p.read_text() for p in (REPO / "tests" / "runner").glob("test_*.py"))
    assert f'"{argv[1]}"' in runner_tests, f"no runner test runs `eagle3 {argv[1]}`"
