"""Which catalogs are in use (`vllm_compat.catalog.sources`): discovery, namespaces, the import-free
pyproject and entry-point readers, and the digest over the engine and every catalog."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vllm_compat.catalog import sources as catalogs
from vllm_compat.catalog.sources import BUILTIN, SourceError, digest, discover

TABLES = [
    '[tool.vllm-compat]\ncatalogs = ["a", "b/c"]\n',
    "[tool.vllm-compat]\ncatalogs = [\n  'a',  # the first\n  \"b\",\n]\n",
    '[project]\nname = "x"\ndependencies = ["vllm-compat"]\n',
    '[tool."vllm-compat"]\ncatalogs = ["a"]\n[tool.other]\ncatalogs = ["zzz"]\n',
    '[tool.vllm-compat]\nother = 1\n',
    '[tool]\nvllm-compat.catalogs = ["dotted"]\n',  # a form the reader does not know
]


@pytest.mark.parametrize("text", TABLES)
def test_the_import_free_reader_agrees_with_tomllib_or_the_digest_differs(tmp_path: Path, text: str) -> None:
    """The fast path reads pyproject.toml without tomllib; where it reads less than tomllib,
    the catalogs in use differ, so their digest does and the full path answers."""
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    exact = tomllib.loads(text).get("tool", {}).get("vllm-compat", {}).get("catalogs", [])
    assert catalogs.pyproject_catalogs(str(path), exact=True) == exact
    fast = catalogs.pyproject_catalogs(str(path), exact=False)
    assert fast == exact or text.startswith("[tool]\n")


def _folders(tmp_path: Path, *names: str) -> list[Path]:
    out = []
    for name in names:
        (tmp_path / name).mkdir(parents=True)
        out.append(tmp_path / name)
    return out


def test_discovery_order_and_names(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    a, b = _folders(tmp_path, "repo/a", "repo/nested/b")
    (tmp_path / "repo" / "pyproject.toml").write_text('[tool.vllm-compat]\ncatalogs = ["nested/b", "a"]\n')
    found, scan = discover(str(site), [str(a)], cwd=str(tmp_path / "repo" / "nested"), exact=True)
    # built-in, then --catalog, then pyproject's (a, named twice, counts once, where first named)
    assert [(s.name, s.root) for s in found] == [(BUILTIN, catalogs.builtin_root()), ("a", str(a)), ("b", str(b))]
    assert scan == {"mtime": os.stat(site).st_mtime_ns, "found": []}


def test_entry_points_are_read_from_dist_infos(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "teamfixes" / "catalog").mkdir(parents=True)
    di = site / "teamfixes-1.0.dist-info"
    di.mkdir()
    (di / "entry_points.txt").write_text("[console_scripts]\nx = y:z\n\n[vllm_compat.catalogs]\nteam = teamfixes.catalog\n")
    (site / "other-2.0.dist-info").mkdir()
    found, scan = discover(str(site), cwd=str(tmp_path))
    assert [(s.name, s.root) for s in found[1:]] == [("team", str(site / "teamfixes" / "catalog"))]
    assert scan["found"] == [["team", "teamfixes.catalog", "teamfixes-1.0.dist-info"]]
    # the cached scan is used while the site's mtime stands, and not after a change
    (di / "entry_points.txt").write_text("")  # (in place: the mtime of the site stays)
    assert [s.name for s in discover(str(site), cwd=str(tmp_path), cached=scan)[0]] == [BUILTIN, "team"]
    (site / "new-1.0.dist-info").mkdir()
    assert [s.name for s in discover(str(site), cwd=str(tmp_path), cached=scan)[0]] == [BUILTIN]


def test_an_editable_install_is_found_through_its_pth_path(tmp_path: Path) -> None:
    site, src = tmp_path / "site", tmp_path / "src"
    (src / "mytrain" / "patches").mkdir(parents=True)
    di = site / "mytrain-0.1.dist-info"
    di.mkdir(parents=True)
    (di / "entry_points.txt").write_text("[vllm_compat.catalogs]\nmytrain = mytrain.patches\n")
    (site / "__editable__.mytrain-0.1.pth").write_text(f"{src}\n")
    found, _ = discover(str(site), cwd=str(tmp_path))
    assert found[1].root == str(src / "mytrain" / "patches")


@pytest.mark.parametrize(("setup", "invalid", "words"), [
    (lambda t: [str(t / "missing")], False, "does not exist"),
    (lambda t: [str(p) for p in _folders(t, "x/fixes", "y/fixes")], True, "two catalogs are named 'fixes'"),
    (lambda t: [str(p) for p in _folders(t, "bad name")], True, "bad catalog name 'bad name'"),
    (lambda t: [str(p) for p in _folders(t, "built-in")], True, "bad catalog name 'built-in'"),
])
def test_bad_sources(tmp_path: Path, setup, invalid: bool, words: str) -> None:
    (tmp_path / "site").mkdir()
    with pytest.raises(SourceError, match=words) as exc:
        discover(str(tmp_path / "site"), setup(tmp_path), cwd=str(tmp_path))
    assert exc.value.invalid is invalid


def test_the_digest_covers_the_engine_and_every_catalog(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "site").mkdir()
    (fixes,) = _folders(tmp_path, "fixes")
    (fixes / "p.py").write_text("X = 1\n")
    one = digest(discover(str(tmp_path / "site"), [str(fixes)], cwd=str(tmp_path))[0])
    (fixes / "p.py").write_text("X = 2\n")
    two = digest(discover(str(tmp_path / "site"), [str(fixes)], cwd=str(tmp_path))[0])
    assert one[0] != two[0] and one[1]["engine"] == two[1]["engine"]
    assert one[1]["catalogs"][BUILTIN] == two[1]["catalogs"][BUILTIN] != two[1]["catalogs"]["fixes"]
    # the engine: patch.py and every module of the transform/ package, by content
    engine = tmp_path / "engine"
    (engine / "transform" / "__pycache__").mkdir(parents=True)
    (engine / "catalog").mkdir()
    for name in ("catalog/patch.py", "catalog/sources.py", "transform/__init__.py", "transform/walk.py"):
        (engine / name).write_text(f"# {name}\n")
    monkeypatch.setattr(catalogs, "_HERE", str(engine / "catalog"))
    monkeypatch.setattr(catalogs, "_ENGINE", str(engine))
    base = catalogs.engine_digest()
    (engine / "catalog" / "sources.py").write_text("# not semantics\n")
    (engine / "transform" / "__pycache__" / "walk.cpython-311.pyc").write_bytes(b"\0")
    assert catalogs.engine_digest() == base
    seen = {base}
    for change in ("catalog/patch.py", "transform/walk.py", "transform/__init__.py"):
        (engine / change).write_text(f"# {change}, changed\n")
        seen.add(catalogs.engine_digest())
    (engine / "transform" / "statements.py").write_text("X = 1\n")  # a new module
    seen.add(catalogs.engine_digest())
    (engine / "transform" / "statements.py").rename(engine / "transform" / "match.py")  # renamed
    seen.add(catalogs.engine_digest())
    assert len(seen) == 6


def test_catalogs_imports_nothing_but_os_and_hashlib() -> None:
    code = "import sys; before = set(sys.modules); import vllm_compat.catalog.sources; print(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert set(eval(out)) <= {"vllm_compat", "vllm_compat.catalog", "vllm_compat.catalog.sources", "hashlib", "_hashlib", "_blake2"}, out  # noqa: S307


def test_user_catalogs_load_without_writing_bytecode(tmp_path: Path) -> None:
    (fixes,) = _folders(tmp_path, "fixes")
    (fixes / "m.py").write_text("X = 1\n")
    (tmp_path / "site").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = ("from vllm_compat.catalog.loader import load; from vllm_compat.catalog.sources import discover; "
            f"load(discover({str(tmp_path / 'site')!r}, [{str(fixes)!r}], cwd={str(tmp_path)!r})[0])")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert sorted(p.name for p in fixes.iterdir()) == ["m.py"]
