"""The static proof's calls: functions, classes through their bases, and the ``__init__``
generated for dataclasses, vLLM's ``@config``, pydantic models, ``msgspec.Struct``."""

from __future__ import annotations

import pytest
from checkkit import FUNC_TREE, check, kinds, make_tree, messages


def assert_one_call(r, line: int, problem: str | None) -> None:
    """One vLLM call was bound: cleanly when ``problem`` is None, else as a bad call at
    ``line`` whose message says ``problem``."""
    assert r.calls_checked == 1, r
    if problem is None:
        assert r.ok, r.findings
    else:
        assert set(kinds(r)) == {(line, "bad-call")}, r.findings
        assert problem in messages(r)


# ---------------------------------------------------------------------------------------------
# calls of functions
# ---------------------------------------------------------------------------------------------

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
    assert_one_call(r, 3, problem)
    if problem is not None:
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
    assert_one_call(r, 4, problem)


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
    assert_one_call(r, 3, problem)
