"""Load-time validation of the catalog: contradictions, ordering, bad ranges; and the real one."""

import pytest

from vllm_compat.catalog.loader import CatalogError, _ordered, _validated, load
from vllm_compat.catalog.patch import AddKeyword, Patch, ReplaceStmt

F = "speculators/x.py"


def patch(pid: str, *, edits=(), after=(), target_versions=">=0.3", requires=None) -> Patch:
    return Patch(id=pid, title=pid, target="speculators", target_versions=target_versions,
                 why="w", upstream="u", remove_when="r", requires=requires or {"vllm": ">=0.11.1"},
                 edits=tuple(edits), after=tuple(after))


def test_two_unordered_patches_on_one_anchor_contradict() -> None:
    a = patch("a", edits=[ReplaceStmt(F, "f", old="x = 1", new="x = 2")])
    b = patch("b", edits=[ReplaceStmt(F, "f", old="x = 1", new="x = 3")])
    with pytest.raises(CatalogError, match="contradictory patches a and b"):
        _validated([a, b])


def test_ordering_resolves_a_shared_anchor() -> None:
    a = patch("a", edits=[ReplaceStmt(F, "f", old="x = 1", new="x = 2")])
    b = patch("b", edits=[ReplaceStmt(F, "f", old="x = 1", new="x = 3")], after=["a"])
    assert [p.id for p in _ordered(_validated([b, a]))] == ["a", "b"]


def test_disjoint_version_ranges_do_not_contradict() -> None:
    a = patch("a", edits=[AddKeyword(F, "f", call="S", keyword="k", value="1")], requires={"vllm": "<0.29"})
    b = patch("b", edits=[AddKeyword(F, "f", call="S", keyword="k", value="2")], requires={"vllm": ">=0.29"})
    assert len(_validated([a, b])) == 2


@pytest.mark.parametrize(
    ("patches", "message"),
    [
        ([patch("a"), patch("a")], "duplicate patch ids"),
        ([patch("a", after=["zzz"])], "unknown patches"),
        ([patch("a", target_versions="~~1")], "bad version range"),
    ],
)
def test_invalid_catalogs(patches: list[Patch], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        _validated(patches)


def test_cycle() -> None:
    with pytest.raises(CatalogError, match="cycle"):
        _ordered(_validated([patch("a", after=["b"]), patch("b", after=["a"])]))


def test_real_catalog_loads_and_documents_every_patch() -> None:
    catalog = load()
    assert len(catalog.patches) >= 2
    for p in catalog.patches:
        assert p.id.startswith(f"{p.target}.") and p.module.endswith(p.id.split(".", 1)[1]), p.id
        assert p.why and p.upstream and p.remove_when and p.title, p.id
        assert p.files, p.id


def test_catalog_page_and_changelog_list_every_patch() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = subprocess.run([sys.executable, str(root / "scripts" / "catalog_table.py")],
                           check=True, capture_output=True, text=True).stdout.strip()
    assert table in (root / "docs" / "catalog.md").read_text(), "docs/catalog.md is stale: scripts/catalog_table.py --write"
    changelog = (root / "CHANGELOG.md").read_text()
    catalog = load()
    missing = [x.id for x in (*catalog.patches, *catalog.advisories) if f"`{x.id}`" not in changelog]
    assert not missing, f"CHANGELOG.md does not list {missing}"
    assert catalog.advisories and all(f"`{a.id}`" in table for a in catalog.advisories)


def test_user_catalogs_are_namespaced_ordered_and_widen_the_proven_ranges(tmp_path) -> None:
    from vllm_compat.catalog.sources import BUILTIN, Source, builtin_root

    fixes = tmp_path / "fixes"
    fixes.mkdir()
    (fixes / "__init__.py").write_text('SUPPORTED = {"vllm": ">=0.35,<0.36"}\n')
    (fixes / "_shared.py").write_text('G = "speculators/data_generation/vllm_hidden_states_generator.py"\n')
    body = ("from vllm_compat.patch import AddKeyword, Patch, register\nfrom ._shared import G\n\n"
            "register(Patch(id={pid!r}, title='t', target='speculators', target_versions='==0.3.0', why='w',\n"
            "    upstream='u', remove_when='r', after={after!r},\n"
            "    edits=(AddKeyword(G, 'VllmHiddenStatesGenerator.__del__', call='log.warning', keyword={kw!r}, value='1'),)), __name__)\n")
    (fixes / "a.py").write_text(body.format(pid="speculators.a", after=("speculators.warm_up", "speculators.b"), kw="x"))
    (fixes / "b.py").write_text(body.format(pid="speculators.b", after=(), kw="y"))
    catalog = load([Source(BUILTIN, builtin_root(), "vllm-compat"), Source("fixes", str(fixes), "--catalog")])
    ids = [p.id for p in catalog.patches]
    assert ids[-2:] == ["fixes:speculators.b", "fixes:speculators.a"]  # after the built-in ones, b before a
    assert catalog.by_id("fixes:speculators.a").after == ("speculators.warm_up", "fixes:speculators.b")
    assert catalog.by_id("fixes:speculators.a").module == str(fixes / "a.py")
    assert catalog.where("fixes:speculators.a").startswith("catalog 'fixes'")
    from patches import SUPPORTED

    assert catalog.supported["vllm"] == (SUPPORTED["vllm"], ">=0.35,<0.36")
    assert load().patches == tuple(p for p in catalog.patches if ":" not in p.id)  # the built-in ones unchanged
