"""The static proof's imports: resolution in vLLM modules, try/except and if/else fallbacks,
and the checked files' own package (shims that re-export vLLM names, relative imports)."""

from __future__ import annotations

import pytest
from checkkit import FUNC_TREE, check, kinds, make_tree, messages

from vllm_compat.check import check_sources, clear_cache


# ---------------------------------------------------------------------------------------------
# imports
# ---------------------------------------------------------------------------------------------

IMPORT_TREE = {
    "vllm/mod.py": """
        from typing import TYPE_CHECKING
        import os
        from vllm.other import Reexported
        from vllm.other import Original as Renamed
        from .other import Relative
        from vllm.starred import *
        from vllm.starred_all import *
        def func(): pass
        class Klass: pass
        VALUE = 1
        annotated: int = 2
        try:
            from vllm.nowhere import fallback_name
        except ImportError:
            fallback_name = None
        if TYPE_CHECKING:
            from vllm.other import OnlyForTypes
        __all__ = ["func", "listed_only"]
    """,
    "vllm/other.py": """
        class Reexported: pass
        class Original: pass
        class Relative: pass
        class OnlyForTypes: pass
    """,
    "vllm/starred.py": "def public(): pass\ndef _private(): pass\n",
    "vllm/starred_all.py": "__all__ = ['exported']\ndef exported(): pass\ndef hidden(): pass\n",
    "vllm/pkg/__init__.py": "from vllm.pkg.sub import thing\n",
    "vllm/pkg/sub.py": "thing = 1\n",
    "vllm/pkg/other_sub.py": "x = 1\n",
    "vllm/lazy.py": "def __getattr__(name):\n    raise AttributeError(name)\n",
    "vllm/dyn_globals.py": "for _n in ('a', 'b'):\n    globals()[_n] = 1\n",
    "vllm/passes_globals.py": "def lazy(g): pass\ntorch = lazy(globals())\n",
}


@pytest.mark.parametrize("name", [
    "Reexported", "Renamed", "Relative", "public", "exported", "func", "Klass", "VALUE",
    "annotated", "fallback_name", "listed_only",
])


def test_import_resolves(tmp_path, name):
    root = make_tree(tmp_path, IMPORT_TREE)
    r = check(root, f"from vllm.mod import {name}\n")
    assert r.ok, r.findings


@pytest.mark.parametrize("name", ["missing", "_private", "hidden", "OnlyForTypes", "Original",
                                  "os_missing"])


def test_import_unresolved(tmp_path, name):
    root = make_tree(tmp_path, IMPORT_TREE)
    r = check(root, f"from vllm.mod import {name}\n")
    assert kinds(r) == [(1, "unresolved-import")]
    assert f"'{name}'" in r.findings[0].message and "vllm/mod.py" in r.findings[0].message
    if name == "OnlyForTypes":
        assert "TYPE_CHECKING" in r.findings[0].message


@pytest.mark.parametrize("src,ok", [
    ("import vllm\n", True),
    ("import vllm.pkg.sub\n", True),
    ("import vllm.pkg.sub as s\n", True),
    ("from vllm.pkg import sub\n", True),  # a submodule
    ("from vllm.pkg import other_sub\n", True),  # a submodule not imported by __init__
    ("from vllm.pkg import thing\n", True),
    ("from vllm.lazy import anything\n", True),  # module __getattr__
    ("from vllm.dyn_globals import a\n", True),  # globals()[...] = ...
    ("import vllm.nope\n", False),
    ("import vllm.pkg.nope as n\n", False),
    ("from vllm.nope import x\n", False),
    ("from vllm.pkg.nope import x\n", False),
    ("from vllm.pkg import nope\n", False),
    ("from vllm.passes_globals import nope\n", False),  # globals() only passed along
    ("import numpy_not_vllm\nfrom somewhere_else import x\nfrom . import y\n", True),
])


def test_module_imports(tmp_path, src, ok):
    root = make_tree(tmp_path, IMPORT_TREE)
    r = check(root, src)
    assert r.ok is ok, r.findings
    if not ok:
        assert [f.kind for f in r.findings] == ["unresolved-import"]


def test_import_inside_function_is_checked(tmp_path):
    root = make_tree(tmp_path, IMPORT_TREE)
    r = check(root, """
        def f():
            from vllm.mod import func
            from vllm.mod import gone
            return func()
    """)
    assert kinds(r) == [(4, "unresolved-import")]
    assert r.calls_checked == 1


FALLBACK_TREE = {
    "vllm/new_home.py": "def plan(a, b): pass\n",
    "vllm/old_home.py": "def other(): pass\n",
}


@pytest.mark.parametrize("src,ok", [
    # the first branch fails, the fallback resolves
    ("try:\n    from vllm.old_home import plan\nexcept ImportError:\n"
     "    from vllm.new_home import plan\n", True),
    # the first branch resolves
    ("try:\n    from vllm.new_home import plan\nexcept ImportError:\n"
     "    from vllm.old_home import plan\n", True),
    # ModuleNotFoundError, and a missing module
    ("try:\n    from vllm.gone import plan\nexcept ModuleNotFoundError:\n"
     "    from vllm.new_home import plan\n", True),
    # a three-step chain
    ("try:\n    from vllm.gone import plan\nexcept ImportError:\n    try:\n"
     "        from vllm.old_home import plan\n    except ImportError:\n"
     "        from vllm.new_home import plan\n", True),
    # no branch resolves
    ("try:\n    from vllm.old_home import plan\nexcept ImportError:\n"
     "    from vllm.gone import plan\n", False),
    # a try that does not catch import errors is no fallback
    ("try:\n    from vllm.old_home import plan\nexcept KeyError:\n"
     "    from vllm.new_home import plan\n", False),
])


def test_try_except_import_fallback(tmp_path, src, ok):
    root = make_tree(tmp_path, FALLBACK_TREE)
    r = check(root, src)
    assert r.ok is ok, r.findings
    if not ok:
        assert {f.kind for f in r.findings} == {"unresolved-import"}


def test_fallback_binds_calls_to_the_branch_that_resolves(tmp_path):
    root = make_tree(tmp_path, FALLBACK_TREE)
    head = ("try:\n    from vllm.old_home import plan\nexcept ImportError:\n"
            "    from vllm.new_home import plan\n")
    assert check(root, head + "plan(1, 2)\n").ok
    r = check(root, head + "plan(1)\n")
    assert kinds(r) == [(5, "bad-call")] and "missing required argument 'b'" in messages(r)


@pytest.mark.parametrize("src,ok", [
    # if/else alternatives: one branch resolving is enough
    ("import sys\nif sys.version_info >= (3, 99):\n    from vllm.old_home import plan\n"
     "else:\n    from vllm.new_home import plan\n", True),
    # no else: the import stands alone
    ("import sys\nif sys.version_info >= (3, 99):\n    from vllm.old_home import plan\n", False),
    # type-checking-only imports are not executed
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from vllm.gone import plan\n",
     True),
])


def test_conditional_imports(tmp_path, src, ok):
    root = make_tree(tmp_path, FALLBACK_TREE)
    r = check(root, src)
    assert r.ok is ok, r.findings


# ---------------------------------------------------------------------------------------------
# the checked package itself: shims that re-export vLLM names, relative imports
# ---------------------------------------------------------------------------------------------

SHIM_TREE = {
    **FUNC_TREE,
    "speculators/__init__.py": "",
    "speculators/data_generation/__init__.py": "",
    "speculators/data_generation/logging_utils.py": "class PipelineLogger: pass\n",
}

SHIM = "from vllm.funcs import f, kwonly\ndef own(a): pass\n__all__ = ['f', 'kwonly', 'own']\n"


def test_calls_through_a_vendored_shim_are_bound(tmp_path):
    root = make_tree(tmp_path, SHIM_TREE)
    gen = ("from speculators._vllm_compat_x import f, own\n"
           "from speculators import _vllm_compat_x as shim\n"
           "f(1)\nshim.kwonly(1)\nown(1, 2, 3)\n")
    clear_cache()
    r = check_sources({"speculators/data_generation/gen.py": gen,
                       "speculators/_vllm_compat_x.py": SHIM}, root)
    assert kinds(r) == [(3, "bad-call"), (4, "bad-call")], r.findings
    assert "f(...) missing required argument 'b' (vllm/funcs.py" in messages(r)
    assert "kwonly(...) missing required argument 'k'" in messages(r)
    assert r.calls_checked == 2  # own() belongs to the package, not to vLLM


def test_names_missing_from_the_package_are_reported(tmp_path):
    root = make_tree(tmp_path, SHIM_TREE)
    gen = ("from speculators._vllm_compat_x import nope\n"
           "from speculators._vllm_compat_missing import f\n"
           "from .logging_utils import PipelineLogger\n"
           "from .logging_utils import Gone\n"
           "import torch\nfrom transformers import AutoConfig\n")
    clear_cache()
    r = check_sources({"speculators/data_generation/gen.py": gen,
                       "speculators/_vllm_compat_x.py": SHIM}, root)
    assert kinds(r) == [(1, "unresolved-import"), (2, "unresolved-import"),
                        (4, "unresolved-import")], r.findings
    assert "'Gone' from 'speculators.data_generation.logging_utils'" in messages(r)


def test_given_sources_take_the_place_of_the_files_on_disk(tmp_path):
    root = make_tree(tmp_path, {**SHIM_TREE, "speculators/_vllm_compat_x.py": "x = 1\n"})
    gen = "from speculators._vllm_compat_x import f\nf(1, 2)\n"
    clear_cache()
    r = check_sources({"speculators/gen.py": gen, "speculators/_vllm_compat_x.py": SHIM}, root)
    assert r.ok and r.calls_checked == 1, r.findings
