"""User catalogs that are broken or hostile: a clear message, the documented exit code
(15: inconsistent, 16: cannot be loaded), and nothing written, for every command that reads
the catalogs; on a real patched site (speculators 0.3.0, vLLM 0.32.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

import enginekit as kit
from enginekit import GENERATOR
from test_hostile import refused

INVALID, UNLOADABLE = 15, 16
COMMANDS = (("status",), ("verify",), ("apply",), ("apply", "--dry-run"), ("diff",))


def patch_module(pid: str, edit: str, extra: str = "") -> str:
    return (
        "from vllm_compat.patch import AddKeyword, InsertAfter, Patch, Shim, register\n\n"
        f"register(Patch(id={pid!r}, title='t', target='speculators', target_versions='==0.3.0',\n"
        "    why='w', upstream='u', remove_when='r', requires={'vllm': '>=0.32.0'},\n"
        f"    edits=({edit},){extra}), __name__)\n"
    )


KEYWORD = (f"AddKeyword({GENERATOR!r}, 'VllmHiddenStatesGenerator.__del__', call='log.warning', "
           "keyword='exc_info', value='True')")


def catalog(folder: Path, **modules: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)
    return folder


def every_command(site: Path, folders: list[Path], code: int, words: tuple[str, ...], cwd: Path | None = None,
                  watch: tuple[Path, ...] = ()) -> None:
    args = [a for f in folders for a in ("--catalog", str(f))]
    for cmd in COMMANDS:
        refused(site, (*cmd, *args), code, words, (*folders, *watch), cwd=cwd)


def test_a_good_user_catalog_applies(patched: Path, tmp_path: Path) -> None:
    """(the baseline the hostile cases below differ from)"""
    fixes = catalog(tmp_path / "fixes", kw=patch_module("speculators.kw", KEYWORD))
    res = kit.cli(patched, "apply", "--catalog", str(fixes))
    assert res.returncode == 0, kit.show(res)
    assert "exc_info=True" in (patched / GENERATOR).read_text()


def test_a_catalog_folder_that_does_not_exist(patched: Path, tmp_path: Path) -> None:
    every_command(patched, [tmp_path / "nowhere"], UNLOADABLE, ("nowhere does not exist", "--catalog"))


@pytest.mark.parametrize(("text", "what"), [
    ("raise RuntimeError('broken on purpose')\n", "RuntimeError: broken on purpose"),
    ("def f(:\n", "SyntaxError"),
    ("import a_module_that_is_not_installed\n", "ModuleNotFoundError"),
    ("import sys\nsys.exit(3)\n", "SystemExit"),
])
def test_a_module_that_fails_to_import(patched: Path, tmp_path: Path, text: str, what: str) -> None:
    fixes = catalog(tmp_path / "fixes", kw=patch_module("speculators.kw", KEYWORD), broken=text)
    every_command(patched, [fixes], UNLOADABLE, ("catalog 'fixes'", str(fixes / "broken.py"), "does not import", what))


def test_two_catalogs_with_one_name(patched: Path, tmp_path: Path) -> None:
    a = catalog(tmp_path / "a" / "fixes", kw=patch_module("speculators.kw", KEYWORD))
    b = catalog(tmp_path / "b" / "fixes", other=patch_module("speculators.other", KEYWORD))
    every_command(patched, [a, b], INVALID, ("two catalogs are named 'fixes'", str(a), str(b)))


def test_ids_that_collide_within_a_catalog(patched: Path, tmp_path: Path) -> None:
    fixes = catalog(tmp_path / "fixes", one=patch_module("speculators.kw", KEYWORD), two=patch_module("speculators.kw", KEYWORD))
    every_command(patched, [fixes], INVALID, ("duplicate patch ids", "fixes:speculators.kw", "one.py", "two.py"))


@pytest.mark.parametrize("rel", ["../outside.py", "/etc/passwd", "vllm/envs.py", "speculators/../../x.py"])
def test_a_patch_that_writes_outside_its_target_package(patched: Path, tmp_path: Path, rel: str) -> None:
    edit = f"AddKeyword({rel!r}, '', call='f', keyword='k', value='1')"
    fixes = catalog(tmp_path / "fixes", escape=patch_module("speculators.escape", edit))
    every_command(patched, [fixes], INVALID, ("fixes:speculators.escape", repr(rel), "outside its target package"))


def test_a_shim_from_outside_the_catalog(patched: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 1\n")
    fixes = catalog(tmp_path / "fixes", shim=patch_module(
        "speculators.shim", KEYWORD, ", shims=(Shim('../../secret.py', 'speculators/_mine.py'),)"))
    every_command(patched, [fixes], INVALID, ("shim source '../../secret.py'",), watch=(secret,))


def test_a_contradiction_with_the_built_in_catalog(patched: Path, tmp_path: Path) -> None:
    """The same anchor as speculators.warm_up, overlapping versions, no order between them."""
    edit = (f"InsertAfter({GENERATOR!r}, 'VllmHiddenStatesGenerator.__init__', "
            "after='self.executor.initialize_from_config(kv_cache_configs)', new='log.info(\"ready\")')")
    fixes = catalog(tmp_path / "fixes", ready=patch_module("speculators.ready", edit))
    every_command(patched, [fixes], INVALID, ("contradictory patches", "speculators.warm_up (the built-in catalog)",
                                              "fixes:speculators.ready (catalog 'fixes'", "'after'"))
    # ordered after it, the same patch is fine
    ordered = catalog(tmp_path / "ordered" / "fixes", ready=patch_module("speculators.ready", edit, ", after=('speculators.warm_up',)"))
    assert kit.cli(patched, "apply", "--catalog", str(ordered)).returncode == 0


def test_an_entry_point_that_names_no_package(patched: Path, tmp_path: Path) -> None:
    whl = kit.make_wheel(tmp_path / "wheels", "teamfixes", "1.0", {"teamfixes/__init__.py": b""},
                         "[vllm_compat.catalogs]\nteam = teamfixes.catalog\n")
    kit.upstream.unpack(whl, patched)
    every_command(patched, [], UNLOADABLE, ("entry point 'team' of teamfixes-1.0.dist-info", "teamfixes.catalog"))


@pytest.mark.parametrize(("table", "words"), [
    ('catalogs = ["missing"]', ("missing does not exist", "pyproject.toml")),
    ('catalogs = "fixes"', ("not a list of strings",)),
    ('catalogs = [', ("is not valid TOML",)),
])
def test_a_bad_pyproject_table(patched: Path, tmp_path: Path, table: str, words: tuple[str, ...]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(f"[tool.vllm-compat]\n{table}\n")
    every_command(patched, [], UNLOADABLE, words, cwd=repo)
