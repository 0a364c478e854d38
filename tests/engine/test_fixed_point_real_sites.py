"""Every catalog transform is a fixed point on the real upstream files it targets, and the
result does not depend on the process (hash seed, memory layout)."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

import enginekit as kit

from vllm_compat.target import Target

# (file, source, patch ids) already proven: the same file and chain recur across vLLM versions
_PROVEN: dict[tuple[str, str, tuple[str, ...]], str] = {}

SPECULATORS = ("0.3.0", "0.4.0")
VLLM = ("0.11.0", "0.17.0", "0.32.0", "0.33.0")


def _catalog():
    import crashrun

    crashrun.fresh_catalog()  # the catalog is edited while tests run: read it as it is now
    from vllm_compat.catalog.loader import load

    return load()


def _ancestors(catalog, pid: str, applicable: set[str]) -> list[str]:
    out: list[str] = []

    def visit(p: str) -> None:
        for dep in catalog.by_id(p).after:
            if dep in applicable and dep not in out:
                visit(dep)
                out.append(dep)

    visit(pid)
    return out


@pytest.mark.parametrize("vllm", VLLM)
@pytest.mark.parametrize("speculators", SPECULATORS)
def test_transforms_are_fixed_points(speculators: str, vllm: str, tmp_path: Path) -> None:
    from vllm_compat.transform import TransformError, transform_file

    site = kit.build(tmp_path / "site", speculators, vllm, lean=True)
    target = Target(site)
    catalog = _catalog()
    dists = {pkg: target.find(pkg) for pkg in ("speculators", "vllm")}
    decisions = catalog.decide(target, dists)
    applicable = [d.patch for d in decisions if d.status == "applicable"]
    ids = {p.id for p in applicable}
    files = sorted({e.file for p in applicable for e in p.edits})
    failures: list[str] = []
    for rel in files:
        source = (site / rel).read_text(encoding="utf-8")
        editing = [p for p in applicable if any(e.file == rel for e in p.edits)]
        try:
            once = transform_file(rel, source, editing)
            twice = transform_file(rel, once, editing)
        except TransformError as exc:
            failures.append(f"{rel}: all applicable patches: {exc}")
            continue
        if once == source:
            failures.append(f"{rel}: the applicable patches {[p.id for p in editing]} change nothing")
        if twice != once:
            delta = "".join(list(difflib.unified_diff(once.splitlines(True), twice.splitlines(True), "once", "twice"))[:40])
            failures.append(f"{rel}: applying {[p.id for p in editing]} twice is not a fixed point:\n{delta}")
        for p in editing:
            chain = [catalog.by_id(a) for a in _ancestors(catalog, p.id, ids)] + [p]
            key = (rel, kit.sha(source.encode()), tuple(c.id for c in chain))
            if key in _PROVEN:
                continue
            _PROVEN[key] = "ok"
            try:
                one = transform_file(rel, source, chain)
                two = transform_file(rel, one, [p])
            except TransformError as exc:
                failures.append(f"{rel}: {p.id} alone (after {[c.id for c in chain[:-1]]}): {exc}")
                continue
            if two != one:
                failures.append(f"{rel}: {p.id} alone applied twice is not a fixed point")
    assert not failures, f"speculators {speculators} + vLLM {vllm}:\n" + "\n".join(failures)
    print(f"speculators {speculators} + vLLM {vllm}: {len(applicable)} applicable patch(es) on {len(files)} file(s)")


def test_apply_does_not_depend_on_the_process(site: Path) -> None:
    """The same catalog on the same files gives the same bytes in every process (a transform
    that caches by ``id()`` of short-lived nodes does not)."""
    procs = {
        seed: subprocess.Popen([sys.executable, "-m", "vllm_compat", "apply", "--dry-run", "--site-packages", str(site)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(kit.REPO),
                               env=kit.env(PYTHONHASHSEED=seed))
        for seed in ("1", "2", "5")  # seeds that exposed an id()-keyed cache in transform
    }
    outs = {}
    for seed, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        outs[seed] = (proc.returncode, out, err)
    distinct = {v for v in outs.values()}
    assert len(distinct) == 1, "apply --dry-run differs between processes:\n" + "\n".join(
        f"PYTHONHASHSEED={s}: exit {c}: {err.strip()[:300] or out.splitlines()[-1]}" for s, (c, out, err) in outs.items())
    code, out, err = distinct.pop()
    assert code == 0, f"exit {code}\n{err}"
