"""The README's two commands explain themselves: ``scripts/test --help`` says what the script
does before pytest's own help."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_scripts_test_help_describes_the_script_first():
    p = subprocess.run([str(ROOT / "scripts" / "test"), "--help"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: scripts/test [PYTEST ARGS...]\n")
    assert "what .ci/run runs" in p.stdout
    assert p.stdout.index("scripts/test") < p.stdout.index("usage: python -m pytest")  # pytest's follows
