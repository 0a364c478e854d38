"""The docs cannot rot: generated parts are in sync with their sources, the README stays a
README (at most 250 lines, every link resolves), and the code keeps its rooms (no import
circles, no module over 400 lines)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from importgraph import cycles, graph, rooms  # noqa: E402

PACKAGES = ("vllm_compat", "patches", "eagle3_runner")


def test_generated_parts_of_the_docs_are_current():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_gen.py")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_the_generator_notices_a_stale_part(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    import docs_gen

    page = tmp_path / "config.md"
    page.write_text("<!-- config:begin -->\nold\n<!-- config:end -->\n")
    monkeypatch.setattr(docs_gen, "PARTS", {"config": (page, docs_gen.config)})
    assert docs_gen.main([]) == 1
    assert docs_gen.main(["--write"]) == 0 and docs_gen.main([]) == 0
    assert "[train]" in page.read_text()


def test_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_links_between_docs_resolve(page):
    text = (ROOT / "docs" / page).read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (ROOT / "docs" / target).exists(), f"{page}: {target}"


def test_no_import_circles_between_modules_or_rooms():
    g = graph([ROOT / p for p in PACKAGES])
    assert not cycles(g), cycles(g)
    for depth in (1, 2, 3):
        assert not cycles(rooms(g, depth)), (depth, cycles(rooms(g, depth)))


def test_no_import_circles_between_scripts():
    g = graph([ROOT / "scripts"], scripts=True)
    assert "scripts.doc_markers" in g["scripts.docs_gen"]  # bare imports are seen
    assert not cycles(g), cycles(g)


def test_the_circle_finder_finds_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import a  # a late import is still an edge\n")
    assert cycles(graph([pkg])) == [["pkg.a", "pkg.b"]]


def test_every_module_is_at_most_400_lines():
    long = {str(f.relative_to(ROOT)): n for p in PACKAGES for f in (ROOT / p).rglob("*.py")
            if (n := len(f.read_text().splitlines())) > 400}
    assert not long, long
