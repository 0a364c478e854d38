"""Tests of the static proof (:mod:`vllm_compat.check`).

The small vLLM-like trees are written by the tests themselves (they are not upstream code);
the tests marked ``slow`` run the check on real speculators and vLLM sources fetched with
``tests/upstream.py``.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

from vllm_compat.check import CheckReport, Finding, check_sources, clear_cache

sys.path.insert(0, str(Path(__file__).parent))


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """Write a fake site-packages: ``{"vllm/x.py": source}``; packages get an __init__."""
    files = {"vllm/__init__.py": "", **files}
    for rel, src in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))
    for d in {(root / rel).parent for rel in files}:
        while d != root and d.name:
            init = d / "__init__.py"
            if not init.exists():
                init.write_text("")
            d = d.parent
    return root


def check(root: Path, src: str, name: str = "user.py") -> CheckReport:
    clear_cache()
    return check_sources({name: textwrap.dedent(src)}, root)


def kinds(report: CheckReport) -> list[tuple[int, str]]:
    return [(f.line, f.kind) for f in report.findings]


def messages(report: CheckReport) -> str:
    return "\n".join(f.message for f in report.findings)


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


# ---------------------------------------------------------------------------------------------
# calls of functions
# ---------------------------------------------------------------------------------------------

FUNC_TREE = {
    "vllm/funcs.py": """
        from typing import overload
        def f(a, b, c=3): pass
        def kwonly(a, *, k, opt=1): pass
        def posonly(a, /, b): pass
        def star(*args, **kwargs): pass
        def var_kw(a, **kw): pass
        @overload
        def over(x: int) -> int: ...
        @overload
        def over(x: str) -> str: ...
        def over(x, y=None): pass
    """,
    "vllm/reexport/__init__.py": "from vllm.funcs import f as g\n",
}


@pytest.mark.parametrize("call,problem", [
    ("f(1, 2)", None),
    ("f(1, 2, 3)", None),
    ("f(a=1, b=2, c=3)", None),
    ("f(1, b=2)", None),
    ("f(1)", "missing required argument 'b'"),
    ("f(1, 2, 3, 4)", "takes 3 positional arguments but 4 were given"),
    ("f(1, 2, d=4)", "unexpected keyword argument 'd'"),
    ("f(1, 2, a=1)", "multiple values for argument 'a'"),
    ("kwonly(1, k=2)", None),
    ("kwonly(1, 2)", "takes 1 positional argument but 2 were given"),
    ("kwonly(1)", "missing required argument 'k'"),
    ("posonly(1, 2)", None),
    ("posonly(1, b=2)", None),
    ("posonly(a=1, b=2)", "unexpected keyword argument 'a'"),
    ("star()", None),
    ("star(1, 2, x=3)", None),
    ("var_kw(1, anything=2)", None),
    ("var_kw(anything=2)", "missing required argument 'a'"),
    ("over(1)", None),
    ("over(1, y=2)", None),
    ("over(1, z=2)", "unexpected keyword argument 'z'"),
    ("g(1)", "missing required argument 'b'"),
])
def test_function_binding(tmp_path, call, problem):
    root = make_tree(tmp_path, FUNC_TREE)
    src = ("from vllm.funcs import f, kwonly, posonly, star, var_kw, over\n"
           "from vllm.reexport import g\n" + call + "\n")
    r = check(root, src)
    assert r.calls_checked == 1
    if problem is None:
        assert r.ok, r.findings
    else:
        assert set(kinds(r)) == {(3, "bad-call")}
        assert problem in messages(r)
        assert "vllm/funcs.py:" in r.findings[0].message


def test_unpacking_calls_are_skipped_not_counted(tmp_path):
    root = make_tree(tmp_path, FUNC_TREE)
    r = check(root, "from vllm.funcs import f\nargs = ()\nkw = {}\nf(*args)\nf(**kw)\n")
    assert r.ok and r.calls_checked == 0 and r.calls_skipped == 2


def test_module_attribute_calls(tmp_path):
    root = make_tree(tmp_path, FUNC_TREE)
    r = check(root, "import vllm.funcs\nimport vllm.funcs as fm\n"
                    "vllm.funcs.f(1)\nfm.f(1, 2)\nfm.nothing()\n")
    assert kinds(r) == [(3, "bad-call"), (5, "missing-attribute")]
    assert r.calls_checked == 2


def test_non_vllm_calls_are_not_counted(tmp_path):
    root = make_tree(tmp_path, FUNC_TREE)
    r = check(root, "import os\nfrom .local import f\nos.getcwd()\nf(1, 2, 3, 4, 5)\n")
    assert r.ok and r.calls_checked == 0


def test_pragma_skips_a_line(tmp_path):
    root = make_tree(tmp_path, FUNC_TREE)
    r = check(root, "from vllm.funcs import f\nf()  # vllm-compat: ignore\nf()\n")
    assert set(kinds(r)) == {(3, "bad-call")}
    assert r.calls_checked == 1 and r.calls_skipped == 1


# ---------------------------------------------------------------------------------------------
# calls of classes
# ---------------------------------------------------------------------------------------------

CLASS_TREE = {
    "vllm/base.py": """
        from abc import ABC
        class Base(ABC):
            def __init__(self, vllm_config, *, log_stats=False):
                self.vllm_config = vllm_config
            def shared(self, x): pass
    """,
    "vllm/core/__init__.py": "from vllm.core.impl import Impl\n",
    "vllm/core/impl.py": """
        from vllm.base import Base
        class Middle(Base):
            def extra(self): pass
        class Impl(Middle):
            pass
        class Own(Base):
            def __init__(self, vllm_config, kv_cache_config, block_size):
                super().__init__(vllm_config)
        class NoInit:
            pass
    """,
    "vllm/torchy.py": """
        import torch.nn as nn
        class Layer(nn.Module):
            pass
    """,
}


@pytest.mark.parametrize("call,problem", [
    ("Impl(cfg)", None),
    ("Impl(vllm_config=cfg, log_stats=True)", None),
    ("Impl()", "missing required argument 'vllm_config'"),
    ("Impl(cfg, True)", "takes 1 positional argument but 2 were given"),
    ("Impl(cfg, block_size=16)", "unexpected keyword argument 'block_size'"),
    ("Own(cfg, kv, 16)", None),
    ("Own(vllm_config=cfg, kv_cache_config=kv)", "missing required argument 'block_size'"),
    ("NoInit()", None),
    ("NoInit(1)", "takes 0 positional arguments but 1 were given"),
])
def test_class_binding_through_bases(tmp_path, call, problem):
    root = make_tree(tmp_path, CLASS_TREE)
    r = check(root, "from vllm.core import Impl\nfrom vllm.core.impl import Own, NoInit\n"
                    f"cfg = kv = None\n{call}\n")
    assert r.calls_checked == 1
    if problem is None:
        assert r.ok, r.findings
    else:
        assert set(kinds(r)) == {(4, "bad-call")}
        assert problem in messages(r)


def test_class_with_external_base_is_not_bound(tmp_path):
    root = make_tree(tmp_path, CLASS_TREE)
    r = check(root, "from vllm.torchy import Layer\nLayer(1, 2, 3, x=4)\nLayer().anything()\n")
    # both Layer(...) calls are seen and skipped; .anything() cannot be judged
    assert r.ok and r.calls_checked == 0 and r.calls_skipped == 2


DATACLASS_TREE = {
    "vllm/cfg/utils.py": """
        def config(cls):
            return cls
    """,
    "vllm/cfg/sched.py": """
        from dataclasses import InitVar, dataclass, field
        from typing import ClassVar
        from pydantic import Field
        from vllm.cfg.utils import config

        @config
        @dataclass
        class SchedulerConfig:
            max_model_len: InitVar[int]
            is_encoder_decoder: InitVar[bool]
            runner: str = "generate"
            max_num_seqs: int = Field(default=128, ge=1)
            required_field: int = Field(..., ge=0)
            computed: int = Field(init=False)
            derived: list = field(init=False, default_factory=list)
            factory: list = field(default_factory=list)
            plain_field: int = field()
            registry: ClassVar[dict] = {}
            K: "ClassVar[int]" = 3

        @dataclass
        class Child(SchedulerConfig):
            child_only: bool = False

        @dataclass(kw_only=True)
        class KwOnly:
            a: int
            b: int = 0

        class PlainBase:
            def __init__(self, only):
                pass

        @dataclass(init=False)
        class NoGeneratedInit(PlainBase):
            ignored: int = 0

        @dataclass
        class ExplicitInit:
            tensors: dict
            def __init__(self, tensors):
                self.tensors = tensors
    """,
    "vllm/cfg/models.py": """
        import msgspec
        from pydantic import BaseModel, ConfigDict

        class Params(msgspec.Struct, omit_defaults=True):
            max_tokens: int | None = 16
            temperature: float = 1.0
            seed: int = msgspec.field(default=0)

        class Strict(BaseModel):
            model_config = ConfigDict(extra="forbid")
            name: str
            size: int = 1

        class Loose(BaseModel):
            name: str
    """,
}


@pytest.mark.parametrize("call,problem", [
    ("SchedulerConfig(max_model_len=1, is_encoder_decoder=False, required_field=1, "
     "plain_field=2)", None),
    ("SchedulerConfig(max_model_len=1, required_field=1, plain_field=2)",
     "missing required argument 'is_encoder_decoder'"),
    ("SchedulerConfig(max_model_len=1, is_encoder_decoder=False, plain_field=2)",
     "missing required argument 'required_field'"),
    ("SchedulerConfig(max_model_len=1, is_encoder_decoder=False, required_field=1)",
     "missing required argument 'plain_field'"),
    ("SchedulerConfig(max_model_len=1, is_encoder_decoder=False, required_field=1, "
     "plain_field=2, computed=3)", "unexpected keyword argument 'computed'"),
    ("SchedulerConfig(max_model_len=1, is_encoder_decoder=False, required_field=1, "
     "plain_field=2, derived=[])", "unexpected keyword argument 'derived'"),
    ("SchedulerConfig(max_model_len=1, is_encoder_decoder=False, required_field=1, "
     "plain_field=2, registry={})", "unexpected keyword argument 'registry'"),
    ("SchedulerConfig(max_model_len=1, is_encoder_decoder=False, required_field=1, "
     "plain_field=2, K=1)", "unexpected keyword argument 'K'"),
    ("SchedulerConfig(1, False, 'g', 4, 1, [], 2)", None),
    ("Child(max_model_len=1, is_encoder_decoder=False, required_field=1, plain_field=2, "
     "child_only=True)", None),
    ("Child(max_model_len=1, required_field=1, plain_field=2)",
     "missing required argument 'is_encoder_decoder'"),
    ("KwOnly(a=1)", None),
    ("KwOnly(1)", "takes 0 positional arguments but 1 were given"),
    ("ExplicitInit({})", None),
    ("NoGeneratedInit(1)", None),
    ("NoGeneratedInit(ignored=1)", "unexpected keyword argument 'ignored'"),
    ("ExplicitInit(tensors={}, extra=1)", "unexpected keyword argument 'extra'"),
    ("Params(max_tokens=1, temperature=0.0)", None),
    ("Params(max_tokens=1, top_q=0.0)", "unexpected keyword argument 'top_q'"),
    ("Strict(name='x')", None),
    ("Strict(name='x', color=1)", "unexpected keyword argument 'color'"),
    ("Strict('x')", "takes 0 positional arguments but 1 were given"),
    ("Strict(size=2)", "missing required argument 'name'"),
    ("Loose(name='x', color=1)", None),  # pydantic ignores extra fields by default
])
def test_dataclass_like_signatures(tmp_path, call, problem):
    root = make_tree(tmp_path, DATACLASS_TREE)
    r = check(root, "from vllm.cfg.sched import SchedulerConfig, Child, KwOnly, ExplicitInit, "
                    "NoGeneratedInit\n"
                    "from vllm.cfg.models import Params, Strict, Loose\n" + call + "\n")
    assert r.calls_checked == 1, r
    if problem is None:
        assert r.ok, r.findings
    else:
        assert set(kinds(r)) == {(3, "bad-call")}, r.findings
        assert problem in messages(r)


# ---------------------------------------------------------------------------------------------
# methods on vLLM objects
# ---------------------------------------------------------------------------------------------

METHOD_TREE = {
    "vllm/executor/abstract.py": """
        from abc import ABC, abstractmethod
        class Executor(ABC):
            def __init__(self, vllm_config):
                self.vllm_config = vllm_config
                self.callback = None
            def collective_rpc(self, method, timeout=None, args=(), kwargs=None,
                               non_block=False):
                pass
            @abstractmethod
            def execute_model(self, scheduler_output, non_block=False): ...
            @staticmethod
            def make(kind): pass
            @classmethod
            def build(cls, cfg): pass
            @property
            def size(self): return 1
    """,
    "vllm/executor/multiproc.py": """
        from vllm.executor.abstract import Executor
        from vllm.output import Output
        class MultiprocExecutor(Executor):
            def execute_model(self, scheduler_output, non_block=False): pass
            def sample_tokens(self, grammar_output, non_block=False): pass
            def schedule(self) -> Output: pass
            def schedule_str(self) -> "Output": pass
            def schedule_opt(self) -> Output | None: pass
        def make_executor(cfg) -> MultiprocExecutor: pass
    """,
    "vllm/output.py": """
        class Output:
            def total(self): pass
    """,
    "vllm/config.py": """
        from dataclasses import dataclass
        from vllm.output import Output
        @dataclass
        class CacheConfig:
            block_size: int = 16
            def resolved_layout(self): pass
        @dataclass
        class VllmConfig:
            cache_config: CacheConfig = None
            maybe: "CacheConfig | None" = None
            count: int = 0
    """,
    "vllm/dyn.py": """
        class Dynamic:
            def __getattr__(self, name): return 1
    """,
}

METHOD_HEAD = """\
from vllm.executor.multiproc import MultiprocExecutor, make_executor
from vllm.dyn import Dynamic
"""


def mcheck(root, body: str) -> CheckReport:
    return check(root, METHOD_HEAD + textwrap.dedent(body))


def test_methods_on_self_attribute(tmp_path):
    root = make_tree(tmp_path, METHOD_TREE)
    r = mcheck(root, """
        class Gen:
            def __init__(self, cfg):
                self.executor = MultiprocExecutor(vllm_config=cfg)
                self.executor.collective_rpc("get_kv_cache_spec")
            def run(self, so):
                self.executor.execute_model(so)
                self.executor.sample_tokens(None)
                self.executor.collective_rpc("_anything_in_a_string", args=(1,))
                self.executor.set_kv_cache_layout("HND")
                self.executor.sample_tokens()
                self.executor.callback
                self.executor.size
                self.executor.make("x")
                self.executor.build(1)
                self.executor.callback()
    """)
    assert kinds(r) == [(12, "missing-attribute"), (13, "bad-call")], r.findings
    assert "MultiprocExecutor has no attribute 'set_kv_cache_layout'" in messages(r)
    assert "MultiprocExecutor.sample_tokens(...) missing required argument 'grammar_output'" \
        in messages(r)
    # constructor, 2x collective_rpc, execute_model, 2x sample_tokens, make, build
    assert r.calls_checked == 8


def test_methods_on_local_variables_and_annotations(tmp_path):
    root = make_tree(tmp_path, METHOD_TREE)
    r = mcheck(root, """
        def f(cfg, so, ex: MultiprocExecutor):
            e = MultiprocExecutor(cfg)
            e.execute_model(so)
            e.no_such_method()
            ex.no_such_either()
            out = e.schedule()
            out.total()
            out.missing()
            e.schedule_str().missing_too()
            e.schedule_opt().missing_on_optional()
            make_executor(cfg).gone()
    """)
    assert kinds(r) == [(7, "missing-attribute"), (8, "missing-attribute"),
                        (11, "missing-attribute"), (12, "missing-attribute"),
                        (13, "missing-attribute"), (14, "missing-attribute")], r.findings


def test_reassigned_or_shadowed_names_are_not_typed(tmp_path):
    root = make_tree(tmp_path, METHOD_TREE)
    r = mcheck(root, """
        def f(cfg, other):
            e = MultiprocExecutor(cfg)
            e = other
            e.no_such_method()
        def g(e):
            e.no_such_method()
        x = MultiprocExecutor(1)
        def h(x):
            x.no_such_method()
    """)
    assert r.ok, r.findings


def test_guarded_method_calls_are_skipped(tmp_path):
    root = make_tree(tmp_path, METHOD_TREE)
    r = mcheck(root, """
        def f(cfg):
            e = MultiprocExecutor(cfg)
            if hasattr(e, "set_kv_cache_layout"):
                e.set_kv_cache_layout("HND")
            x = e.compile() if hasattr(e, "compile") else None
            try:
                e.warm_up()
            except AttributeError:
                pass
            d = Dynamic()
            d.whatever()
            e.really_missing()
    """)
    assert kinds(r) == [(15, "missing-attribute")], r.findings


def test_super_init_binds_to_the_vllm_base(tmp_path):
    root = make_tree(tmp_path, METHOD_TREE)
    r = mcheck(root, """
        class Mine(MultiprocExecutor):
            def __init__(self, cfg):
                super().__init__(cfg, 2)
    """)
    assert kinds(r) == [(6, "bad-call")], r.findings
    assert "MultiprocExecutor.__init__(...) takes 1 positional argument but 2" in messages(r)


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


def test_methods_through_field_annotations_and_local_return_annotations(tmp_path):
    root = make_tree(tmp_path, METHOD_TREE)
    r = mcheck(root, """
        from vllm.config import VllmConfig
        class Gen:
            def __init__(self):
                self.vllm_config = self._make()
                self.vllm_config.cache_config.resolved_layout()
                self.vllm_config.cache_config.gone_layout()
                self.vllm_config.maybe.gone_too()
                self.vllm_config.count.bit_length()
                build().cache_config.resolved_layout(1)
            def _make(self) -> VllmConfig:
                return VllmConfig()
        def build() -> "VllmConfig":
            return VllmConfig()
    """)
    assert kinds(r) == [(9, "missing-attribute"), (10, "missing-attribute"),
                        (12, "bad-call")], r.findings
    assert "CacheConfig has no attribute 'gone_layout'" in messages(r)


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


def test_names_assigned_two_types_are_not_typed(tmp_path):
    root = make_tree(tmp_path, {**METHOD_TREE, "vllm/other.py": "class Other:\n    pass\n"})
    r = mcheck(root, """
        from vllm.other import Other
        class Gen:
            def __init__(self, cfg):
                self.x = MultiprocExecutor(cfg)
            def reset(self):
                self.x = Other()
            def run(self):
                self.x.sample_tokens(None)
                self.x.not_on_either()
    """)
    assert r.ok, r.findings


def test_attribute_reads_on_typed_vllm_objects(tmp_path):
    root = make_tree(tmp_path, METHOD_TREE)
    r = mcheck(root, """
        from vllm.config import VllmConfig
        def f(cfg: VllmConfig, e: MultiprocExecutor, other):
            a = cfg.cache_config.block_size
            b = cfg.cache_config.gone_field
            c = e.vllm_config
            d = e.size
            e2 = e.no_such_attr
            cfg.cache_config.new_field = 1
            if hasattr(cfg, "later_field"):
                g = cfg.later_field
            h = other.anything
    """)
    assert kinds(r) == [(7, "missing-attribute"), (10, "missing-attribute")], r.findings
    assert "CacheConfig has no attribute 'gone_field'" in messages(r)
