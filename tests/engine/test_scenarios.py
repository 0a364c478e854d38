"""What users run, through the CLI in a subprocess, on real speculators/vLLM files
(patch-package style: one scenario per test)."""

from __future__ import annotations

import json
import py_compile
import shutil
import importlib.util
from pathlib import Path

import enginekit as kit
from enginekit import cli, show

STATE = kit.STATE


def managed(site: Path) -> dict[str, dict]:
    return json.loads((site / STATE / "manifest.json").read_bytes())["files"]


def test_fresh_apply(full_site: Path) -> None:
    site = full_site
    st = cli(site, "status")
    assert st.returncode == 10, show(st)
    assert "pending" in st.stdout
    # -q: the same report, each state counted (the demo's form)
    q = cli(site, "status", "-q")
    states = [p["state"] for p in json.loads(cli(site, "status", "--json").stdout)["patches"]]
    assert q.returncode == 10, show(q)
    assert f"patches: {states.count('pending')} pending" in q.stdout, show(q)
    assert "PATCH" not in q.stdout and len(q.stdout.splitlines()) < 12, show(q)
    before = kit.snapshot(site)

    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    ver = cli(site, "verify")
    assert ver.returncode == 0, show(ver)
    assert ver.stdout.startswith("ok:"), show(ver)

    files = managed(site)
    assert kit.GENERATOR in files
    rec = kit.record(site)
    for rel, entry in files.items():
        assert kit.sha_file(site / rel) == entry["applied"], rel
        if entry["shim"]:
            assert rel not in rec
            continue
        assert entry["pristine"] == rec[rel], rel
        assert entry["applied"] != rec[rel], f"{rel} is unchanged by apply"
        backup = site / STATE / "backup" / rel
        assert backup.is_file(), f"no backup of {rel}"
        assert kit.sha_file(backup) == rec[rel], f"backup of {rel} is not RECORD-exact"
        assert rel in res.stdout
    # only the managed files (and the state folder, and new shim folders) changed
    changed = {line[2:].split(":")[0] for line in kit.snapshot_diff(before, kit.snapshot(site))}
    allowed = set(files) | {str(Path(r).parent) for r in files}
    unexpected = {c for c in changed if c not in allowed and not c.startswith(STATE)}
    assert not unexpected, unexpected
    # the two reference patches are applied on 0.3.0 + 0.32.0
    st = json.loads(cli(site, "status", "--json").stdout)
    states = {p["id"]: p["state"] for p in st["patches"]}
    assert states["speculators.collective_rpc_single_reply"] == "applied"
    assert states["speculators.request_eos_token_id"] == "applied"
    text = (site / kit.GENERATOR).read_text()
    assert "captured_states_list[0]" not in text
    assert "eos_token_id=" not in text.split("Request(", 1)[1].split(")", 1)[0]


def test_reapply_is_a_noop(patched: Path) -> None:
    site = patched
    assert cli(site, "verify").returncode == 0
    before = kit.snapshot(site)
    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    assert "nothing to do" in res.stdout, show(res)
    diff = kit.snapshot_diff(before, kit.snapshot(site))
    assert not diff, "re-apply wrote:\n" + "\n".join(diff)


def test_dry_run_writes_nothing(site: Path) -> None:
    before = kit.snapshot(site)
    res = cli(site, "apply", "--dry-run")
    assert res.returncode == 0, show(res)
    assert f"--- a/{kit.GENERATOR}" in res.stdout and f"+++ b/{kit.GENERATOR}" in res.stdout, show(res)
    assert "-            aux_hidden_states = captured_states_list[0]" in res.stdout or \
        "captured_states_list[0]" in "".join(l for l in res.stdout.splitlines() if l.startswith("-")), show(res)
    assert "@@" in res.stdout
    assert not (site / STATE).exists()
    diff = kit.snapshot_diff(before, kit.snapshot(site))
    assert not diff, "dry run wrote:\n" + "\n".join(diff)


def test_speculators_upgrade_is_stale_then_reapplies(patched: Path) -> None:
    site = patched
    assert cli(site, "verify").returncode == 0
    kit.upgrade_speculators(site, "0.4.0")
    assert kit.dist_info_of(site, "speculators").name == "speculators-0.4.0.dist-info"
    ver = cli(site, "verify")
    assert ver.returncode == 12, show(ver)
    assert "0.3.0 -> 0.4.0" in ver.stdout, show(ver)
    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    ver = cli(site, "verify")
    assert ver.returncode == 0, show(ver)
    manifest = json.loads((site / STATE / "manifest.json").read_bytes())
    assert manifest["dists"]["speculators"]["version"] == "0.4.0"
    rec = kit.record(site)
    for rel, entry in manifest["files"].items():
        if not entry["shim"]:
            assert entry["pristine"] == rec[rel]
            assert kit.sha_file(site / STATE / "backup" / rel) == rec[rel], f"backup of {rel} is not 0.4.0's"
    # the 0.3.0-only patch no longer applies
    st = json.loads(cli(site, "status", "--json").stdout)
    states = {p["id"]: p["state"] for p in st["patches"]}
    assert states["speculators.collective_rpc_single_reply"] == "not-applicable"
    assert states["speculators.request_eos_token_id"] == "applied"


def test_vllm_upgrade_is_stale(tmp_path: Path) -> None:
    site = kit.build(tmp_path / "site-packages", "0.3.0", "0.31.0", lean=True)
    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    assert cli(site, "verify").returncode == 0
    kit.upgrade_vllm(site, "0.32.0", lean=True)
    ver = cli(site, "verify")
    assert ver.returncode == 12, show(ver)
    assert "vllm changed 0.31.0 -> 0.32.0" in ver.stdout, show(ver)
    st = cli(site, "status")
    assert st.returncode == 12 and "stale" in st.stdout, show(st)
    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    ver = cli(site, "verify")
    assert ver.returncode == 0, show(ver)


def test_hand_edit_drifts_and_force_revert(patched: Path) -> None:
    site = patched
    assert cli(site, "verify").returncode == 0
    gen = site / kit.GENERATOR
    gen.write_text(gen.read_text() + "\n# my local tweak\n")
    ver = cli(site, "verify")
    assert ver.returncode == 11, show(ver)
    assert "drifted" in ver.stdout
    before = kit.snapshot(site)
    rev = cli(site, "revert")
    assert rev.returncode == 11, show(rev)
    assert "--force" in rev.stderr and kit.GENERATOR in rev.stderr, show(rev)
    assert not kit.snapshot_diff(before, kit.snapshot(site)), "a refused revert wrote"
    app = cli(site, "apply")
    assert app.returncode == 11, show(app)
    assert not kit.snapshot_diff(before, kit.snapshot(site)), "a refused apply wrote"
    rev = cli(site, "revert", "--force")
    assert rev.returncode == 0, show(rev)
    assert not kit.all_record_exact(site)
    assert not (site / STATE).exists()
    assert cli(site, "status").returncode == 10


def test_revert_restores_the_pristine_tree(full_site: Path, pristine_full: Path) -> None:
    site = full_site
    assert cli(site, "apply").returncode == 0
    touched = list(managed(site))
    # import-time bytecode of the patched modules, as running the pipeline would leave
    for rel in touched:
        if rel.endswith(".py"):
            py_compile.compile(str(site / rel), cfile=importlib.util.cache_from_source(str(site / rel)), doraise=True)
    rev = cli(site, "revert")
    assert rev.returncode == 0, show(rev)
    assert kit.GENERATOR in rev.stdout
    bad = kit.all_record_exact(site)
    assert not bad, f"not RECORD-exact after revert: {bad}"
    assert not (site / STATE).exists()
    extra = kit.files(site) - kit.files(pristine_full)
    missing = kit.files(pristine_full) - kit.files(site)
    assert not extra and not missing, (sorted(extra), sorted(missing))
    # no folder left behind either, except the (now empty of our modules) __pycache__
    extra_dirs = {d for d in kit.dirs(site) - kit.dirs(pristine_full) if not d.endswith("__pycache__")}
    assert not extra_dirs, extra_dirs
    for rel in touched:
        cache = (site / rel).parent / "__pycache__"
        assert not list(cache.glob(Path(rel).stem + ".*.pyc")) if cache.is_dir() else True
    again = cli(site, "revert")
    assert again.returncode == 0 and "nothing to revert" in again.stdout, show(again)


def test_apply_drops_stale_bytecode(site: Path) -> None:
    src = site / kit.GENERATOR
    pyc = Path(importlib.util.cache_from_source(str(src)))
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    other = site / "speculators" / "__init__.py"
    other_pyc = Path(importlib.util.cache_from_source(str(other)))
    py_compile.compile(str(other), cfile=str(other_pyc), doraise=True)
    assert pyc.is_file()
    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    assert not pyc.exists(), "stale bytecode of the patched module survived apply"
    assert other_pyc.is_file(), "apply removed bytecode of a module it did not touch"
    assert cli(site, "verify").returncode == 0
