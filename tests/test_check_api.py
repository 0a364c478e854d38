"""Tests of the static proof (:mod:`vllm_compat.check`) as a whole: the package imports only
the standard library, the report, errors, the cache, and real speculators and vLLM sources
(the tests marked ``slow``, fetched with ``tests/upstream.py``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from checkkit import check, kinds, make_tree

from vllm_compat.check import CheckReport, Finding, check_sources, clear_cache

sys.path.insert(0, str(Path(__file__).parent))


# ---------------------------------------------------------------------------------------------
# module hygiene
# ---------------------------------------------------------------------------------------------

def test_check_module_imports_only_the_standard_library():
    package = Path(__import__("vllm_compat.check").check.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) > 1  # the package's every module is read, not only __init__.py
    imported = set()
    for node in (n for m in modules for n in ast.walk(ast.parse(m.read_text()))):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            imported.add(node.module.split(".")[0])
    imported.discard("__future__")
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    assert not imported & {"vllm", "torch", "libcst", "speculators"}


def test_report_is_a_value(tmp_path):
    root = make_tree(tmp_path, {"vllm/a.py": "def f(x): pass\n"})
    r = check(root, "from vllm.a import f\nf(1)\n")
    assert isinstance(r, CheckReport) and r.ok and r.files_checked == 1 and r.calls_checked == 1
    r2 = check(root, "from vllm.a import f\nf()\n")
    assert not r2.ok and all(isinstance(f, Finding) for f in r2.findings)
    assert r2.findings[0].file == "user.py" and r2.findings[0].line == 2


def test_missing_vllm_root_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        check_sources({"x.py": "import vllm\n"}, tmp_path)


def test_syntax_error(tmp_path):
    root = make_tree(tmp_path, {})
    r = check(root, "def f(:\n    pass\n")
    assert kinds(r) == [(1, "syntax-error")]


def test_a_changed_vllm_tree_is_not_judged_from_the_cache(tmp_path):
    root = make_tree(tmp_path, {"vllm/a.py": "def f(x): pass\n"})
    src = {"user.py": "from vllm.a import f\nf(1)\n"}
    clear_cache()
    assert check_sources(src, root).ok
    (root / "vllm" / "a.py").write_text("def f(x, required_now): pass\n")
    r = check_sources(src, root)  # same root, same process: the cache must notice
    assert kinds(r) == [(2, "bad-call")]
    (root / "vllm" / "a.py").unlink()
    r = check_sources(src, root)
    assert kinds(r) == [(1, "unresolved-import")]


# ---------------------------------------------------------------------------------------------
# real sources (downloads wheels)
# ---------------------------------------------------------------------------------------------

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"


def _speculators_files(version: str) -> dict[str, str]:
    import zipfile

    import upstream

    with zipfile.ZipFile(upstream.wheel("speculators", version)) as zf:
        return {name: zf.read(name).decode() for name in (GENERATOR, WORKER)}


def _vllm_root(version: str) -> Path:
    import upstream

    return upstream.source_tree(upstream.vllm_wheel(version))


@pytest.mark.slow
def test_unpatched_0_3_0_breaks_on_vllm_0_32_0():
    r = check_sources(_speculators_files("0.3.0"), _vllm_root("0.32.0"))
    text = "\n".join(f"{f.file}:{f.line} {f.kind} {f.message}" for f in r.findings)
    expected = [
        ("bad-call", "Scheduler(...) missing required argument 'block_size'"),
        ("bad-call", "SchedulerConfig(...) missing required argument 'is_encoder_decoder'"),
        ("bad-call", "get_kv_cache_config_from_groups(...) unexpected keyword argument "
                     "'kv_cache_specs'"),
        ("bad-call", "Request(...) unexpected keyword argument 'eos_token_id'"),
    ]
    for kind, msg in expected:
        assert any(f.kind == kind and msg in f.message and f.file == GENERATOR
                   for f in r.findings), f"{msg!r} not in:\n{text}"
    assert r.calls_checked >= 20


@pytest.mark.slow
def test_unpatched_0_3_0_is_clean_on_vllm_0_11_0():
    r = check_sources(_speculators_files("0.3.0"), _vllm_root("0.11.0"))
    assert r.ok, r.findings
    assert r.files_checked == 2
    assert r.calls_checked >= 20  # not a vacuous pass


@pytest.mark.slow
def test_unpatched_0_4_0_on_vllm_0_33_0_reports_the_moved_planning_functions():
    r = check_sources(_speculators_files("0.4.0"), _vllm_root("0.33.0"))
    missing = {f.message.split("'")[1] for f in r.findings if f.kind == "unresolved-import"}
    assert {"get_kv_cache_config_from_groups", "_get_kv_cache_groups_uniform_spec",
            "unify_hybrid_kv_cache_specs"} <= missing, r.findings
