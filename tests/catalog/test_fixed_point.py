"""Every catalog transform is a fixed point on the real files it targets.

For both speculators versions and a spread of vLLM versions (every release boundary a patch
declares): the real speculators wheel is unpacked into a throw-away site beside a stand-in vLLM
distribution of that version (only its metadata: selection reads nothing else), the catalog is
applied with vllm-compat's API, and then

* each selected patch, applied once more to its own result (in catalog order: patches declared
  ``after`` others see their output), changes nothing;
* ``apply`` wrote exactly the composition of the selected patches (it always transforms the
  pristine file), the result compiles, and a second ``apply`` has nothing to do;
* the patch selection matches the version ranges the catalog declares.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import upstream  # noqa: E402

SPECULATORS = ("0.3.0", "0.4.0")
# Each declared boundary and its neighbours (0.11.0: nothing but version-independent patches).
VLLM = ("0.11.0", "0.11.1", "0.12.0", "0.17.0", "0.18.0", "0.22.0", "0.27.0", "0.29.0",
        "0.32.0", "0.33.0")


def _stand_in_vllm(site: Path, version: str) -> None:
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\n")
    (info / "RECORD").write_text(f"vllm/__init__.py,,\nvllm-{version}.dist-info/METADATA,,\n")
    (info / "top_level.txt").write_text("vllm\n")


@pytest.fixture(scope="module")
def wheels():
    return {v: upstream.wheel("speculators", v) for v in SPECULATORS}


@pytest.fixture
def site(tmp_path, wheels, request):
    speculators, vllm = request.param
    s = tmp_path / "site-packages"
    upstream.unpack(wheels[speculators], s)
    _stand_in_vllm(s, vllm)
    return s


CELLS = [(s, v) for s in SPECULATORS for v in VLLM]


@pytest.mark.parametrize("site", CELLS, indirect=True, ids=[f"speculators{s}-vllm{v}" for s, v in CELLS])
def test_catalog_is_a_fixed_point(site):
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from vllm_compat import api
    from vllm_compat.catalog.loader import load
    from vllm_compat.target import Target
    from vllm_compat.transform import apply_edits

    speculators = next(p.name[: -len(".dist-info")].split("-")[1] for p in site.glob("speculators-*.dist-info"))
    vllm = next(p.name[: -len(".dist-info")].split("-")[1] for p in site.glob("vllm-*.dist-info"))
    pristine = {}
    catalog = load()
    for p in catalog.patches:
        for e in p.edits:
            pristine.setdefault(e.file, (site / e.file).read_text())

    first = api.apply(Target.resolve(str(site)), allow_unsupported=True)
    states = {p.id: p.state for p in first.report.patches}

    # The selection is what the declared ranges say.
    selected = []
    for p in catalog.patches:
        want = Version(speculators) in SpecifierSet(p.target_versions, prereleases=True) and all(
            Version(vllm) in SpecifierSet(spec, prereleases=True) for dep, spec in p.requires.items()
            if dep == "vllm"
        )
        assert (states[p.id] != "not-applicable") == want, (p.id, states[p.id])
        if want:
            selected.append(p)

    # Each patch is idempotent on its own result, in catalog order.
    current = dict(pristine)
    for p in selected:
        for file in {e.file for e in p.edits}:
            edits = [(p.id, e) for e in p.edits if e.file == file]
            once = apply_edits(current[file], edits, file)
            twice = apply_edits(once, edits, file)
            assert twice == once, f"{p.id} is not a fixed point on {file}"
            current[file] = once

    # apply (which always transforms the pristine file) wrote exactly that, and it compiles.
    for file, text in current.items():
        on_disk = (site / file).read_text()
        assert on_disk == text, f"apply wrote something else to {file}"
        compile(on_disk, file, "exec")

    again = api.apply(Target.resolve(str(site)), allow_unsupported=True)
    assert again.nothing_to_do and not again.written
    assert all(p.state in ("applied", "not-applicable", "obsolete") for p in again.report.patches)
