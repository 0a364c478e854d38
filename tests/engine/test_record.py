"""`vllm-compat record`, patch-package style, through the CLI on sites built from the real
speculators and vLLM wheels: a hand edit becomes a patch module in the user's catalog that
re-applies byte for byte after a reinstall and after a vLLM upgrade within its range."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import enginekit as kit
from enginekit import GENERATOR, STATE, cli, show
from test_hostile import refused

RECORD = 17

# Three hand edits of the generator as apply leaves it (speculators 0.3.0): a comment and a
# value of a constant, a statement with a comment added between two, a keyword argument.
EDITS = (
    ("MAX_NUM_SEQS = 32  # Maximum sequences for prefill-only workload\n",
     "MAX_NUM_SEQS = 64  # local: more sequences per prefill step\n"),
    ("        self._setup_capture()\n",
     "        self._setup_capture()\n        # local: say which layers are captured\n"
     "        log.info(f\"capturing layers {self.layer_ids}\")\n"),
    ('                log.warning("Exception during executor shutdown")\n',
     '                log.warning("Exception during executor shutdown", exc_info=True)\n'),
)


def hand_edit(text: str) -> str:
    for old, new in EDITS:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def project(tmp_path: Path, catalogs: str = '["vllm_fixes"]') -> Path:
    """A user's training repository whose pyproject.toml names its catalog folder."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(f'[project]\nname = "training"\n\n[tool.vllm-compat]\ncatalogs = {catalogs}\n')
    return repo


def generator_patches(site: Path, cwd: Path) -> list[str]:
    st = json.loads(cli(site, "status", "--json", cwd=cwd).stdout)
    return next(f["patches"] for f in st["files"] if f["path"] == GENERATOR)


def test_the_workflow_on_real_wheels(tmp_path: Path) -> None:
    """edit -> record -> (commit) -> reinstall / upgrade vLLM -> apply -> verify."""
    site = kit.build(tmp_path / "site-packages", "0.3.0", "0.31.0")
    assert cli(site, "apply").returncode == 0
    repo = project(tmp_path)  # names vllm_fixes/, which the first record creates
    gen = site / GENERATOR
    gen.write_text(hand_edit(gen.read_text()))
    mine = gen.read_bytes()
    ver = cli(site, "verify")
    assert ver.returncode == 11 and "drifted" in ver.stdout, show(ver)
    ver = cli(site, "verify", cwd=repo)  # a catalog folder named but missing: said, not skipped
    assert ver.returncode == 16 and "vllm_fixes does not exist" in ver.stderr, show(ver)

    rec = cli(site, "record", "gen_fix", cwd=repo)
    assert rec.returncode == 0, show(rec)
    module = repo / "vllm_fixes" / "gen_fix.py"
    assert f"recorded vllm_fixes:speculators.gen_fix in {module}" in rec.stdout, show(rec)
    assert "ReplaceStmt" in rec.stdout and "AddKeyword" in rec.stdout, show(rec)
    assert "--catalog" not in rec.stdout  # pyproject.toml names the folder: every command finds it
    text = module.read_text()
    assert "target_versions='==0.3.0'" in text and "requires={'vllm': '>=0.31.0'}" in text, text
    assert text.count("TODO") >= 4 and "after=(" in text
    assert gen.read_bytes() == mine, "record changed the edited file"
    ver = cli(site, "verify", cwd=repo)
    assert ver.returncode == 0 and ver.stdout.startswith("ok:"), show(ver)
    assert "vllm_fixes:speculators.gen_fix: title, why, upstream, remove_when still TODO" in ver.stdout, show(ver)

    # `pip install --force-reinstall speculators==0.3.0`: the wheel's file is back, the edit gone
    kit.upgrade_speculators(site, "0.3.0")
    assert gen.read_bytes() != mine
    assert cli(site, "verify", cwd=repo).returncode == 10
    res = cli(site, "apply", cwd=repo)
    assert res.returncode == 0, show(res)
    assert gen.read_bytes() == mine, "the recorded patch did not give the hand-edited bytes after a reinstall"
    assert cli(site, "verify", cwd=repo).returncode == 0

    # `pip install -U vllm` within the patch's range (>=0.31.0): 0.31.0 -> 0.32.0
    before = generator_patches(site, repo)
    kit.upgrade_vllm(site, "0.32.0", lean=False)
    ver = cli(site, "verify", cwd=repo)
    assert ver.returncode == 12 and "vllm changed 0.31.0 -> 0.32.0" in ver.stdout, show(ver)
    res = cli(site, "apply", cwd=repo)
    assert res.returncode == 0, show(res)
    assert generator_patches(site, repo) == before  # the catalog selects the same for this file
    assert gen.read_bytes() == mine, "the recorded patch did not give the hand-edited bytes after the upgrade"
    assert cli(site, "verify", cwd=repo).returncode == 0

    # the TODO lines filled in: the catalog changed, so apply once more (writes no file)
    module.write_text(re.sub(r"'TODO: [^']*'", "'filled in'", text))
    ver = cli(site, "verify", cwd=repo)
    assert ver.returncode == 10 and "catalog vllm_fixes changed since apply" in ver.stdout, show(ver)
    res = cli(site, "apply", cwd=repo)
    assert res.returncode == 0 and "wrote 0 file(s)" in res.stdout, show(res)
    ver = cli(site, "verify", cwd=repo)
    assert ver.returncode == 0 and "TODO" not in ver.stdout, show(ver)

    rev = cli(site, "revert", cwd=repo)
    assert rev.returncode == 0, show(rev)
    assert not kit.all_record_exact(site) and not (site / STATE).exists()


def test_an_upgrade_that_brings_new_patches_for_the_file(tmp_path: Path) -> None:
    """Recorded on vLLM 0.28.0; on 0.29.0 the built-in kv_cache_layout patch also edits the
    generator: the result is the built-in catalog's 0.29.0 file with the same hand edits."""
    site = kit.build(tmp_path / "site-packages", "0.3.0", "0.28.0", lean=True)
    fixes = tmp_path / "fixes"
    assert cli(site, "apply").returncode == 0
    gen = site / GENERATOR
    gen.write_text(hand_edit(gen.read_text()))
    rec = cli(site, "record", "gen_fix", "--catalog", str(fixes))
    assert rec.returncode == 0, show(rec)
    assert "--catalog" in rec.stdout  # not named by a pyproject.toml: say so
    assert "speculators.kv_cache_layout" in (fixes / "gen_fix.py").read_text()  # ordered after it

    kit.upgrade_vllm(site, "0.29.0", lean=True)
    reference = kit.copy_site(site, tmp_path / "reference")
    assert cli(site, "apply", "--catalog", str(fixes)).returncode == 0
    assert cli(reference, "apply").returncode == 0  # the built-in catalog alone
    ref = (reference / GENERATOR).read_text()
    assert "resolve_kv_cache_layout" in ref
    assert gen.read_text() == hand_edit(ref)
    assert cli(site, "verify", "--catalog", str(fixes)).returncode == 0


def _own_package(tmp_path: Path) -> tuple[dict[str, bytes], Path]:
    files = {
        "mytrain/__init__.py": b'"""A training package that calls vLLM internals."""\n',
        "mytrain/train.py": (b"from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups\n\n\n"
                             b"def kv_config(cfg, groups, memory):\n"
                             b"    return get_kv_cache_config_from_groups(cfg, groups, memory)\n"),
    }
    return files, kit.make_wheel(tmp_path / "wheels", "mytrain", "1.2.0", files)


def test_a_catalog_for_the_users_own_package(tmp_path: Path) -> None:
    """Another target than speculators: the user's own package, installed from its wheel."""
    site = kit.build(tmp_path / "site-packages", "0.3.0", "0.32.0", lean=True)
    assert cli(site, "apply").returncode == 0
    files, whl = _own_package(tmp_path)
    kit.upstream.unpack(whl, site)
    train = site / "mytrain" / "train.py"
    train.write_text(train.read_text().replace("(cfg, groups, memory)\n", "(\n        vllm_config=cfg, kv_cache_groups=groups, available_memory=memory\n    )\n"))
    mine = train.read_bytes()
    fixes = tmp_path / "fixes"
    before = kit.snapshot(site)
    bad = cli(site, "record", "kv_keywords", "--package", "mytrain", "--catalog", str(fixes),
              extra_env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "nowhere")})
    assert bad.returncode == RECORD and "--wheel" in bad.stderr, show(bad)
    assert not kit.snapshot_diff(before, kit.snapshot(site)) and not fixes.exists()
    # pip download finds the wheel (here in a local index folder): the pristine file, proven by RECORD
    rec = cli(site, "record", "kv_keywords", "--package", "mytrain", "--catalog", str(fixes),
              extra_env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(whl.parent)})
    assert rec.returncode == 0, show(rec)
    text = (fixes / "kv_keywords.py").read_text()
    assert "target='mytrain'" in text and "target_versions='==1.2.0'" in text and "'>=0.32.0'" in text, text
    assert train.read_bytes() == mine
    assert cli(site, "verify", "--catalog", str(fixes)).returncode == 0
    assert (site / STATE / "backup" / "mytrain" / "train.py").read_bytes() == files["mytrain/train.py"]

    rev = cli(site, "revert")
    assert rev.returncode == 0, show(rev)
    assert not kit.all_record_exact(site, "mytrain") and not kit.all_record_exact(site)
    kit.pip_uninstall(site, kit.dist_info_of(site, "mytrain"))
    kit.upstream.unpack(whl, site)  # reinstalled
    assert cli(site, "verify", "--catalog", str(fixes)).returncode == 10
    assert cli(site, "apply", "--catalog", str(fixes)).returncode == 0
    assert train.read_bytes() == mine
    # the same with --wheel, on another site: no download
    other = kit.build(tmp_path / "other", "0.3.0", "0.32.0", lean=True)
    kit.upstream.unpack(whl, other)
    (other / "mytrain" / "train.py").write_bytes(mine)
    rec = cli(other, "record", "kv_keywords", "--package", "mytrain", "--wheel", str(whl),
              "--catalog", str(tmp_path / "fixes2"), extra_env={"PIP_NO_INDEX": "1"})
    assert rec.returncode == 0, show(rec)


def test_a_catalog_installed_as_a_package_is_found_by_its_entry_point(tmp_path: Path) -> None:
    site = kit.build(tmp_path / "site-packages", "0.3.0", "0.32.0", lean=True)
    assert cli(site, "apply").returncode == 0
    gen = site / GENERATOR
    gen.write_text(hand_edit(gen.read_text()))
    mine = gen.read_bytes()
    work = tmp_path / "work" / "teamfixes_catalog"
    assert cli(site, "record", "gen_fix", "--catalog", str(work)).returncode == 0
    # the team ships the folder as the package `teamfixes` (its catalog in teamfixes/catalog/)
    whl = kit.make_wheel(tmp_path / "wheels", "teamfixes", "1.0",
                         {"teamfixes/__init__.py": b"", "teamfixes/catalog/gen_fix.py": (work / "gen_fix.py").read_bytes()},
                         "[vllm_compat.catalogs]\nteamfixes = teamfixes.catalog\n")
    kit.upgrade_speculators(site, "0.3.0")
    kit.upstream.unpack(whl, site)
    st = cli(site, "status", "--json")
    ids = {p["id"]: p["state"] for p in json.loads(st.stdout)["patches"]}
    assert ids.get("teamfixes:speculators.gen_fix") == "pending", show(st)
    assert cli(site, "apply").returncode == 0
    assert gen.read_bytes() == mine
    ver = cli(site, "verify")
    assert ver.returncode == 0 and "teamfixes:speculators.gen_fix" in ver.stdout, show(ver)


@pytest.fixture
def edited(patched: Path) -> Path:
    gen = patched / GENERATOR
    gen.write_text(hand_edit(gen.read_text()))
    return patched


def test_record_refuses_with_nothing_written(edited: Path, patched_pristine: Path, tmp_path: Path) -> None:
    fixes = tmp_path / "fixes"
    refused(edited, ("record", "gen fix", "--catalog", str(fixes)), 2, ("bad patch name",), (fixes,))
    refused(edited, ("record", "gen_fix"), 2, ("--catalog DIR",), (fixes,), cwd=tmp_path)
    refused(patched_pristine, ("record", "gen_fix", "--catalog", str(fixes)), RECORD, ("no hand edits",), (fixes,))
    gen = edited / GENERATOR
    good = gen.read_text()
    gen.write_text(good.replace("MAX_NUM_SEQS = 64", "MAX_NUM_SEQS = (64"))
    refused(edited, ("record", "gen_fix", "--catalog", str(fixes)), RECORD, ("does not parse", GENERATOR), (fixes,))
    gen.write_text(good)
    shim = next(p for p in (edited / "speculators").glob("_vllm_compat_*.py"))
    shim.write_text(shim.read_text() + "\n# mine\n")
    refused(edited, ("record", "gen_fix", "--catalog", str(fixes)), RECORD, ("vendored shim",), (fixes,))


def test_recording_a_file_again(edited: Path, tmp_path: Path) -> None:
    """Delete the module, edit more, record again: one patch holds all the edits."""
    fixes = tmp_path / "fixes"
    assert cli(edited, "record", "gen_fix", "--catalog", str(fixes)).returncode == 0
    (fixes / "gen_fix.py").unlink()
    gen = edited / GENERATOR
    gen.write_text(gen.read_text().replace("VLLM_BLOCK_SIZE = 16", "VLLM_BLOCK_SIZE = 32"))
    mine = gen.read_bytes()
    res = cli(edited, "record", "gen_fix", "--catalog", str(fixes))
    assert res.returncode == 0, show(res)
    text = (fixes / "gen_fix.py").read_text()
    assert "exc_info" in text and "capturing layers" in text and "new='32'" in text
    kit.upgrade_speculators(edited, "0.3.0")
    assert cli(edited, "apply", "--catalog", str(fixes)).returncode == 0
    assert gen.read_bytes() == mine


def test_record_refuses_an_existing_module(edited: Path, tmp_path: Path) -> None:
    fixes = tmp_path / "fixes"
    fixes.mkdir()
    (fixes / "gen_fix.py").write_text("# someone's patch\n")
    before = (fixes / "gen_fix.py").read_bytes()
    res = cli(edited, "record", "gen_fix", "--catalog", str(fixes))
    assert res.returncode == RECORD and "exists" in res.stderr, show(res)
    assert (fixes / "gen_fix.py").read_bytes() == before


@pytest.fixture
def patched_pristine(reference, tmp_path: Path) -> Path:
    """A patched site with no hand edits."""
    return kit.copy_site(reference.patched_site, tmp_path / "clean-site")
