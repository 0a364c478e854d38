"""The static matrix (``scripts/static_matrix.py``): 3 speculators x 26 vLLM releases.

The slow test runs all 78 cells (downloads the wheels once into the cache of
``tests/upstream.py``) and requires every one to be clean after ``vllm-compat apply``.
The fast tests cover the script's own logic.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scriptkit import load_script

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "static_matrix.py"


def _load():
    return load_script("static_matrix")


def test_the_matrix_has_78_cells_and_every_minor_release():
    m = _load()
    cells = m.select(None)
    assert len(cells) == 78 and len(set(cells)) == 78
    assert m.SPECULATORS == ("0.3.0", "0.4.0", "0.4.0.1")
    assert m.VLLM[0] == "0.11.0" and m.VLLM[-1] == "0.34.0" and len(m.VLLM) == 26
    minors = [tuple(map(int, v.split("."))) for v in m.VLLM]
    assert minors == sorted(minors)
    assert {mi for _, mi, _ in minors} == set(range(11, 35))


def test_the_matrix_covers_the_catalogs_proven_ranges():
    """Every release the matrix proves lies inside the catalog's SUPPORTED ranges, and the
    newest vLLM minor the ranges admit is in the matrix (a range is never wider than the proof)."""
    from patches import SUPPORTED
    from vllm_compat.catalog.versions import matches

    m = _load()
    assert all(matches(SUPPORTED["vllm"], v) for v in m.VLLM)
    patched = SUPPORTED["speculators"][0]  # (the second range, 0.5-0.9, has nothing to patch: current_matrix.py)
    assert all(matches(patched, s) for s in m.SPECULATORS)
    newest = tuple(map(int, m.VLLM[-1].split(".")))
    assert not matches(SUPPORTED["vllm"], f"{newest[0]}.{newest[1] + 1}.0")


@pytest.mark.parametrize("arg,expected", [
    ("0.32.0", {("0.3.0", "0.32.0"), ("0.4.0", "0.32.0"), ("0.4.0.1", "0.32.0")}),
    ("0.4.0.1@0.34.0", {("0.4.0.1", "0.34.0")}),
    ("0.4.0*@0.34.0", {("0.4.0", "0.34.0"), ("0.4.0.1", "0.34.0")}),
    ("0.3.0@0.33.0", {("0.3.0", "0.33.0")}),
    ("0.4.0@0.11.*", {("0.4.0", "0.11.0"), ("0.4.0", "0.11.1"), ("0.4.0", "0.11.2")}),
    ("0.3.0@0.12.0,0.13.0", {("0.3.0", "0.12.0"), ("0.3.0", "0.13.0"), ("0.4.0", "0.13.0"),
                             ("0.4.0.1", "0.13.0")}),
])
def test_cell_selection(arg, expected):
    assert set(_load().select(arg)) == expected


def test_unknown_cell_is_a_usage_error():
    with pytest.raises(SystemExit):
        _load().select("0.99.0")


def test_render_counts_findings_and_says_when_apply_did_not_run():
    m = _load()
    recs = [
        {"speculators": "0.3.0", "vllm": "0.11.0", "clean": True, "findings": []},
        {"speculators": "0.4.0", "vllm": "0.11.0", "clean": False,
         "findings": [{"file": "a.py", "line": 3, "kind": "bad-call", "message": "boom"}] * 2},
    ]
    md = m.render(recs, applied=False, seconds=1.0)
    assert "| 0.11.0 | clean | 2 |" in md
    assert "WITHOUT" in md and "1/2 cells clean" in md and "`a.py:3` bad-call: boom" in md
    assert "WITHOUT" not in m.render(recs, applied=True, seconds=1.0)


def test_managed_files_include_manifest_files_and_shims(tmp_path):
    m = _load()
    site = tmp_path
    for rel in m.BASE_FILES + ("speculators/_vllm_compat_kv.py", "speculators/other.py",
                               "speculators/train/x.py"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("")
    (site / ".vllm_compat").mkdir()
    (site / ".vllm_compat" / "manifest.json").write_text(json.dumps(
        {"files": {"speculators/train/x.py": {}}}))
    assert m.managed_files(site) == list(m.BASE_FILES) + [
        "speculators/train/x.py", "speculators/_vllm_compat_kv.py"]


@pytest.mark.slow
def test_all_78_cells_are_clean(tmp_path):
    """Every cell must be clean after apply.  Fails until the catalog covers every break."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--jobs", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=3600)
    out = tmp_path / "static-findings.json"
    assert out.is_file(), f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    table = (tmp_path / "static-findings.md").read_text()
    assert len(result["cells"]) == 78, proc.stderr[-3000:]
    assert result["applied"], "the matrix ran without `vllm-compat apply`"
    assert all(c.get("calls_checked", 0) > 0 for c in result["cells"]), "vacuous cells"
    assert result["clean"] == 78, table
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.slow
def test_unpatched_cells_end_to_end(tmp_path):
    """Two real cells without apply: 0.3.0 fits 0.11.0, and breaks on 0.32.0."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--no-apply",
                           "--cells", "0.3.0@0.11.0,0.3.0@0.32.0"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "WITHOUT" in proc.stdout + proc.stderr
    result = json.loads((tmp_path / "static-findings.json").read_text())
    cells = {c["vllm"]: c for c in result["cells"]}
    assert not result["applied"] and set(cells) == {"0.11.0", "0.32.0"}
    assert cells["0.11.0"]["clean"] and cells["0.11.0"]["calls_checked"] >= 20
    messages = " ".join(f["message"] for f in cells["0.32.0"]["findings"])
    assert "Scheduler(...) missing required argument 'block_size'" in messages
    table = (tmp_path / "static-findings.md").read_text()
    assert "| 0.11.0 | clean |" in table
    assert f"| 0.32.0 | {len(cells['0.32.0']['findings'])} |" in table
