"""Errors that parse, and no false "ok" (issue 32): with ``--json`` every error of vllm-compat is
one JSON object on stdout (``exit_code``, ``result``, ``error``), and ``apply``, ``status`` and
``revert`` on a site without speculators exit 3 as ``verify`` does, writing nothing there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import enginekit as kit


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(kit.REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "vllm_compat", *args], cwd=kit.REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, code, result, says", [
    (("verify", "--json", "--site-packages", "/nonexistent"), 3, "env", "site-packages folder not found: /nonexistent"),
    (("status", "--json", "--site-packages", "/nonexistent"), 3, "env", "not found"),
    (("check", "--json", "--site-packages", "/nonexistent"), 3, "env", "not found"),
    (("prove", "--json", "--site-packages", "/nonexistent"), 3, "env", "not found"),
    (("status", "--json", "--no-such-flag"), 2, "usage", "unrecognized arguments: --no-such-flag"),
    (("check", "--json", "--against", "vllm>=0.30"), 2, "usage", "DIST==VERSION"),
])
def test_json_errors_are_json_on_stdout(args, code, result, says):
    proc = cli(*args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)  # the whole of stdout is one object
    assert report["exit_code"] == code and report["result"] == result and says in report["error"], report


def test_without_json_an_error_is_one_line_on_stderr():
    proc = cli("verify", "--site-packages", "/nonexistent")
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == ["vllm-compat: error: site-packages folder not found: /nonexistent"]


@pytest.mark.parametrize("command", ["apply", "status", "revert", "verify"])
def test_a_site_without_speculators_is_an_environment_error(command, tmp_path: Path):
    site = tmp_path / "empty"
    site.mkdir()
    proc = cli(command, "--site-packages", str(site))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "speculators is not installed" in proc.stderr and "nothing to" in proc.stderr
    assert list(site.iterdir()) == []  # no state folder, no lock
    proc = cli(command, "--json", "--site-packages", str(site))
    assert proc.returncode == 3 and json.loads(proc.stdout)["result"] == "env"
