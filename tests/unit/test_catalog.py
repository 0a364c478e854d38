"""Load-time validation of the catalog: contradictions, ordering, bad ranges; and the real one."""

import pytest

from vllm_compat.catalog import CatalogError, _ordered, _validated, load
from vllm_compat.patch import AddKeyword, Patch, ReplaceStmt

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


def test_readme_table_and_changelog_list_every_patch() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = subprocess.run([sys.executable, str(root / "scripts" / "catalog_table.py")],
                           check=True, capture_output=True, text=True).stdout.strip()
    assert table in (root / "README.md").read_text(), "README catalog table is stale: scripts/catalog_table.py --write"
    changelog = (root / "CHANGELOG.md").read_text()
    missing = [p.id for p in load().patches if f"`{p.id}`" not in changelog]
    assert not missing, f"CHANGELOG.md does not list {missing}"
