"""The static proof's methods and attributes on vLLM objects whose type is known locally."""

from __future__ import annotations

import textwrap

from checkkit import check, kinds, make_tree, messages

from vllm_compat.check import CheckReport


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
