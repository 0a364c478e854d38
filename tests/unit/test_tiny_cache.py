"""The tiny verifier's per-machine cache (eagle3_runner.tiny.cache): built once per recipe and
code, copied whole afterwards, rebuilt when either changes, never seen half-built."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_runner.tiny import cache


def _builder(calls: list[Path]):
    def build(folder: Path) -> None:
        calls.append(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "weights.bin").write_bytes(b"w" * 1000)
        (folder / "done.json").write_text(json.dumps({"n": len(calls)}))
    return build


def _built(folder: Path) -> bool:
    return (folder / "done.json").is_file()


def test_built_once_then_copied(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[Path] = []
    assert cache.cached_build(tmp_path / "a", {"arch": "llama"}, _builder(calls), _built) is False
    assert cache.cached_build(tmp_path / "b", {"arch": "llama"}, _builder(calls), _built) is True
    assert len(calls) == 1 and calls[0].parent == tmp_path / "cache" / "tiny"
    assert (tmp_path / "a" / "weights.bin").read_bytes() == (tmp_path / "b" / "weights.bin").read_bytes()
    entries = sorted(p.name for p in (tmp_path / "cache" / "tiny").iterdir())
    assert len(entries) == 1 and entries[0].startswith("llama-") and "building" not in entries[0]


def test_another_recipe_or_code_builds_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[Path] = []
    cache.cached_build(tmp_path / "a", {"arch": "llama"}, _builder(calls), _built)
    cache.cached_build(tmp_path / "b", {"arch": "qwen3"}, _builder(calls), _built)
    assert len(calls) == 2
    key = cache.recipe_key({"arch": "llama"})
    real = Path(cache.__file__).parent / "verifier.py"
    copy = tmp_path / "pkg"
    copy.mkdir()
    for name in ("__init__.py", "arch.py", "verifier.py", "cache.py"):
        (copy / name).write_bytes((real.parent / name).read_bytes())
    (copy / "verifier.py").write_text((copy / "verifier.py").read_text() + "\n# a change to the recipe's code\n")
    monkeypatch.setattr(cache, "__file__", str(copy / "cache.py"))
    assert cache.recipe_key({"arch": "llama"}) != key


def test_a_failed_build_leaves_no_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_CACHE_DIR", str(tmp_path / "cache"))

    def broken(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "weights.bin").write_bytes(b"half")
        raise RuntimeError("interrupted")

    try:
        cache.cached_build(tmp_path / "a", {"arch": "llama"}, broken, _built)
    except RuntimeError:
        pass
    assert not (tmp_path / "a").exists()
    assert list((tmp_path / "cache" / "tiny").iterdir()) == []  # no entry, no scratch folder
    calls: list[Path] = []
    assert cache.cached_build(tmp_path / "a", {"arch": "llama"}, _builder(calls), _built) is False and len(calls) == 1

