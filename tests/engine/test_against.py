"""``vllm-compat check --against`` / ``--wheel``: the pre-upgrade check, on real wheels.

The site is a patched vLLM 0.32.0 + speculators site built from the real wheels; the check runs
the real CLI in a subprocess against real releases (vllm 0.34.0, speculators 0.4.0.1, fetched
into the cache) and must leave the site byte-identical.  The refusals: an unreachable index with
an empty cache (18), a release the index does not have (19), a bad pin (2); and doctored
speculators wheels where one patch's anchor is gone (4) or a patched file calls what vLLM lacks (14).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import enginekit as kit

GENERATOR = kit.GENERATOR


def tree_digest(site: Path) -> str:
    """Every path, symlink target, mode and byte under ``site``."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(site):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, site).encode() + b"\0")
            if os.path.islink(path):
                h.update(b"L" + os.readlink(path).encode())
            else:
                h.update(oct(os.stat(path).st_mode).encode())
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def cli(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(kit.REPO), full.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "vllm_compat", *args], cwd=kit.REPO, env=full,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def applied_site(pristine_full, tmp_path) -> Path:
    """A full speculators 0.4.0 / vLLM 0.32.0 site, patched, as a user has it before upgrading."""
    site = kit.build(tmp_path / "site-packages", "0.4.0", "0.32.0")
    proc = cli("apply", "--site-packages", str(site))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return site


@pytest.mark.parametrize("installed", ["0.32.0", "0.33.0"])
def test_against_vllm_0_34_0_exits_0_and_leaves_the_site_byte_identical(installed, tmp_path):
    site = kit.build(tmp_path / "site-packages", "0.4.0", installed)
    proc = cli("apply", "--site-packages", str(site))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    applied_site = site
    kit.upstream.vllm_wheel("0.34.0")  # warm cache, as the goal is stated
    before = tree_digest(applied_site)
    t0 = time.monotonic()
    proc = cli("check", "--site-packages", str(applied_site), "--against", "vllm==0.34.0", "--json")
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["versions"] == {"speculators": "0.4.0", "vllm": "0.34.0"}
    assert report["in_range"] and report["result"] == "ok"
    assert report["calls_checked"] >= 30, "a check that bound nothing proves nothing"
    states = {p["id"]: p["state"] for p in report["patches"]}
    assert states["speculators.capture_hooks"] == "applies"
    assert states["speculators.kv_cache_planning"] == "applies"  # vllm >=0.33.0 only
    assert set(states.values()) <= {"applies", "not-applicable", "obsolete"}
    assert tree_digest(applied_site) == before
    assert seconds <= 60, f"check --against took {seconds:.1f} s with a warm cache"


def test_against_speculators_and_vllm_from_a_site_without_speculators(tmp_path):
    site = kit.build(tmp_path / "site-packages", None, "0.32.0")
    before = tree_digest(site)
    proc = cli("check", "--site-packages", str(site), "--against", "speculators==0.4.0.1",
               "--against", "vllm==0.34.0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "checked against: speculators 0.4.0.1, vllm 0.34.0" in proc.stdout
    assert "proven range: inside" in proc.stdout and "result: ok (exit 0)" in proc.stdout
    assert tree_digest(site) == before
    # and without naming speculators there is nothing to check: a usage error that says why
    proc = cli("check", "--site-packages", str(site), "--against", "vllm==0.34.0")
    assert proc.returncode == 2 and "--against speculators==VERSION" in proc.stderr


def test_an_unreachable_index_with_an_empty_cache_is_exit_18(applied_site, tmp_path):
    before = tree_digest(applied_site)
    env = {"VLLM_COMPAT_CACHE": str(tmp_path / "empty-cache"), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": ""}
    proc = cli("check", "--site-packages", str(applied_site), "--against", "vllm==0.34.0", env=env)
    assert proc.returncode == 18, proc.stdout + proc.stderr
    assert "cannot reach the package index for vllm==0.34.0" in proc.stderr
    assert tree_digest(applied_site) == before


def test_an_unknown_release_is_exit_19_and_a_bad_pin_exit_2(applied_site):
    proc = cli("check", "--site-packages", str(applied_site), "--against", "vllm==0.99.0")
    assert proc.returncode == 19, proc.stdout + proc.stderr
    assert "the index has no vllm==0.99.0" in proc.stderr and "0.34.0" in proc.stderr
    for bad in ("vllm", "vllm>=0.34", "==0.34.0"):
        proc = cli("check", "--site-packages", str(applied_site), "--against", bad)
        assert proc.returncode == 2 and "DIST==VERSION" in proc.stderr, bad


def _doctored_speculators(tmp_path: Path, edit) -> Path:  # noqa: ANN001
    """speculators 0.4.0's files with the generator edited by ``edit``, as a wheel (RECORD true)."""
    whl = kit.upstream.wheel("speculators", "0.4.0")
    with zipfile.ZipFile(whl) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if ".dist-info/" not in n and not n.endswith("/")}
    files[GENERATOR] = edit(files[GENERATOR].decode()).encode()
    return kit.make_wheel(tmp_path / "wheels", "speculators", "0.4.0", files)


def test_a_patch_whose_anchor_is_gone_is_named_exit_4(applied_site, tmp_path):
    # speculators.results_in_input_order replaces this expression; a release that rewrote it
    def edit(src: str) -> str:
        assert "sorted(request_id_to_idx.keys())" in src
        return src.replace("request_id_to_idx", "index_of_request")  # renamed in "a new release"

    whl = _doctored_speculators(tmp_path, edit)
    proc = cli("check", "--site-packages", str(applied_site), "--wheel", str(whl), "--against", "vllm==0.34.0",
               "--json")
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    bad = {p["id"]: p for p in report["patches"] if p["state"] == "does-not-match"}
    assert set(bad) == {"speculators.results_in_input_order"}, report["patches"]
    assert GENERATOR in bad["speculators.results_in_input_order"]["detail"]
    # the other patches were still applied and checked
    assert any(p["state"] == "applies" for p in report["patches"]) and report["calls_checked"] > 0


def test_a_call_vllm_does_not_have_is_an_api_problem_exit_14(applied_site, tmp_path):
    def edit(src: str) -> str:
        return src + ("\n\ndef _uses_gone_api():\n"
                      "    from vllm.v1.core.sched.scheduler import Scheduler\n"
                      "    return Scheduler.no_such_method_in_any_vllm()\n")

    whl = _doctored_speculators(tmp_path, edit)
    proc = cli("check", "--site-packages", str(applied_site), "--wheel", str(whl), "--against", "vllm==0.34.0")
    assert proc.returncode == 14, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "api-problems" in proc.stdout and "no_such_method_in_any_vllm" in proc.stdout


def test_a_release_the_catalogs_do_not_reach_is_exit_13(applied_site):
    """speculators 0.2.0 (older than every patch's range): nothing applies, nothing is proven."""
    proc = cli("check", "--site-packages", str(applied_site), "--against", "speculators==0.2.0", "--json")
    assert proc.returncode == 13, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert not report["in_range"] and "speculators 0.2.0 is outside the proven range" in report["unsupported"][0]
    assert not any(p["state"] == "applies" for p in report["patches"])
    assert any("do not reach this release" in n for n in report["notes"])


def test_speculators_0_9_with_its_hs_connectors_is_checked_not_refused(applied_site):
    """speculators 0.9.0 has nothing to patch: from a patched 0.4.0 site, the check of 0.9.0 with
    the hs-connectors it pins binds hs-connectors' files to the installed vLLM (was: exit 13)."""
    proc = cli("check", "--site-packages", str(applied_site), "--against", "speculators==0.9.0",
               "--against", "hs-connectors==0.9.0", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["in_range"] and report["versions"]["speculators"] == "0.9.0"
    assert not any(p["state"] == "applies" for p in report["patches"])
    assert "hs_connectors/fp8_hidden_states_connector.py" in report["files"] and report["calls_checked"] >= 5
