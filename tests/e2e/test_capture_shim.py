"""The vendored capture (``patches/shims/``) on a toy model, without vLLM engines.

What the CPU build cannot run: Model Runner V2 (GPU only; no ``input_batch``, requests sorted per
step by scheduled-token count).  A fake runner reproduces both runners' layouts around a toy
residual-stream model, so per-request attribution, chunking, padding and decode rows, the
capture convention (input of layer i, id N = last layer's output before the final norm), the
"record only inside execute_model" rule, the attribution check and the shared-memory hand-over
are checked for both.  The shims import each other by their vendored names, so they are
loaded under those names here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

SHIMS = Path(__file__).resolve().parents[2] / "patches" / "shims"
VENDORED = {"runner_layout": "_vllm_compat_runner_layout", "host_memory": "_vllm_compat_host_memory",
            "capture": "_vllm_compat_capture", "generator_capture": "_vllm_compat_generator_capture",
            "shared_states": "_vllm_compat_shared_states"}


@pytest.fixture
def shims(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.distributed",
                        SimpleNamespace(get_tp_group=lambda: SimpleNamespace(rank_in_group=0)))
    if "speculators" not in sys.modules:
        monkeypatch.setitem(sys.modules, "speculators", SimpleNamespace(__path__=[]))
    mods = {}
    for source, name in VENDORED.items():
        spec = importlib.util.spec_from_file_location(f"speculators.{name}", SHIMS / f"{source}.py")
        mod = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, f"speculators.{name}", mod)
        spec.loader.exec_module(mod)
        mods[source] = mod
    return SimpleNamespace(**mods)


class Layer(torch.nn.Module):
    """vLLM-style decoder layer: (positions, hidden_states, residual) -> (out, residual)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, positions, hidden_states, residual):
        stream = hidden_states.clone() if residual is None else hidden_states + residual
        hidden_states.mul_(0)  # in-place damage to the inputs, as fused add+norm kernels do
        return torch.tanh(stream * (self.k + 1)) + positions[:, None], stream


class Base(torch.nn.Module):
    def __init__(self, n: int, hidden: int, vocab: int = 50) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed_tokens = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(Layer(k) for k in range(n))

    def forward(self, input_ids, positions):
        h, r = self.embed_tokens(input_ids), None
        for layer in self.layers:
            h, r = layer(positions, h, r)
        return h + r


def reference(base: Base, ids: list[int]) -> list[torch.Tensor]:
    """Residual stream entering each layer, then after the last layer (ids 0..n)."""
    positions = torch.arange(len(ids), dtype=torch.float32)
    out, h, r = [], base.embed_tokens(torch.tensor(ids)), None
    for k in range(len(base.layers)):
        stream = h if r is None else h + r
        out.append(stream.clone())
        h, r = torch.tanh(stream * (k + 1)) + positions[:, None], stream
    out.append(h + r)
    return out


class FakeRunner:
    """Runs ``Base`` over a step's requests laid out as the given runner would."""

    def __init__(self, n: int, runner_v2: bool, pad: int = 3, hidden: int = 8) -> None:
        self.model = SimpleNamespace(model=Base(n, hidden))
        self.runner_v2, self.pad = runner_v2, pad
        if not runner_v2:
            self.input_batch = SimpleNamespace(req_ids=[], num_reqs=0)
        self.prompts: dict[str, list[int]] = {}
        self.done: dict[str, int] = {}
        self.lie = 0  # shift every reported num_computed_tokens (an attribution bug)

    def step(self, counts: dict[str, int]) -> SimpleNamespace:
        """The scheduler's output for ``counts`` (new requests first seen here)."""
        new = [SimpleNamespace(req_id=r, prompt_token_ids=self.prompts[r], num_computed_tokens=self.done.get(r, 0))
               for r in counts if r not in self.done]
        old = [r for r in counts if r in self.done]
        cached = SimpleNamespace(req_ids=old, num_computed_tokens=[self.done[r] + self.lie for r in old])
        return SimpleNamespace(num_scheduled_tokens=counts, scheduled_new_reqs=new, scheduled_cached_reqs=cached,
                               finished_req_ids=set())

    def execute_model(self, so):
        counts = so.num_scheduled_tokens
        order = sorted(counts, key=counts.get) if self.runner_v2 else list(reversed(list(counts)))
        ids, pos, qsl = [], [], [0]
        for rid in order:
            start = self.done.get(rid, 0)
            prompt = self.prompts[rid] + [0] * counts[rid]  # decode tokens past the prompt
            ids += prompt[start:start + counts[rid]]
            pos.append(torch.arange(start, start + counts[rid], dtype=torch.float32))
            qsl.append(qsl[-1] + counts[rid])
            self.done[rid] = start + counts[rid]
        ids, positions = torch.tensor(ids + [0] * self.pad), torch.cat(pos + [torch.zeros(self.pad)])
        if self.runner_v2:
            self.execute_model_state = SimpleNamespace(
                input_batch=SimpleNamespace(req_ids=order, query_start_loc_np=np.array(qsl)))
        else:
            self.input_batch = SimpleNamespace(req_ids=order + [None], num_reqs=len(order))
        self.model.model(ids, positions)


def _worker(runner: FakeRunner) -> SimpleNamespace:
    return SimpleNamespace(model_runner=runner)


def _prompts(runner: FakeRunner, lengths: dict[str, int]) -> None:
    g = torch.Generator().manual_seed(1)
    for rid, n in lengths.items():
        runner.prompts[rid] = torch.randint(1, 50, (n,), generator=g).tolist()


STEPS = [{"req_0_0": 10}, {"req_0_0": 1, "req_0_1": 4, "req_0_2": 5}, {"req_0_2": 10},
         {"req_0_2": 8, "req_0_1": 1}]  # chunked prefill in budgets of 10, then a decode row
LENGTHS = {"req_0_0": 11, "req_0_1": 4, "req_0_2": 23}


@pytest.mark.parametrize("runner_v2", [False, True], ids=["v1-runner", "model-runner-v2"])
def test_per_request_states_follow_the_convention(shims, runner_v2):
    n = 5
    runner = FakeRunner(n, runner_v2)
    layer_ids = [0, 2, n]
    capture = shims.generator_capture.HiddenStatesCapture.install(_worker(runner), layer_ids)
    _prompts(runner, LENGTHS)
    runner.model.model(torch.randint(1, 50, (6,)), torch.zeros(6))  # a warm-up forward: not recorded
    for counts in STEPS:
        runner.execute_model(runner.step(counts))

    got = capture.collect()
    assert list(got) == ["req_0_0", "req_0_1", "req_0_2"]  # scheduling order
    for rid, length in LENGTHS.items():
        want = reference(runner.model.model, runner.prompts[rid])
        assert len(got[rid]) == len(layer_ids)
        for lid, tensor in zip(layer_ids, got[rid]):
            assert tensor.shape == (length, 8)  # the decode row of req_0_1 is dropped
            torch.testing.assert_close(tensor, want[lid], rtol=0, atol=0)
    assert capture.collect() is None  # collected once


def test_misattributed_rows_raise_instead_of_returning_wrong_states(shims):
    runner = FakeRunner(3, runner_v2=False)
    capture = shims.generator_capture.HiddenStatesCapture.install(_worker(runner), [1])
    _prompts(runner, LENGTHS)
    runner.execute_model(runner.step(STEPS[0]))
    runner.lie = 1  # later chunks claim to start one row late: a row is never written
    for counts in STEPS[1:]:
        runner.execute_model(runner.step(counts))
    with pytest.raises(RuntimeError) as err:
        capture.collect()
    assert "req_0_0: 10 of 11 prompt rows captured" in str(err.value)
    assert "req_0_2: captured positions are not 0..T-1" in str(err.value)  # complete, but row 5 missing


def test_pinned_pool_carves_owned_tensors_and_reuses_freed_space(shims, monkeypatch):
    monkeypatch.setattr(torch, "empty", _unpinned(torch.empty))  # no CUDA here: same layout, unpinned
    pool = shims.host_memory.PinnedPool(3 * 4096)
    a = pool.take((10, 8), torch.bfloat16)
    b = pool.take((3,), torch.long)
    assert a.untyped_storage().nbytes() == 160 and b.untyped_storage().nbytes() == 24  # own storages
    assert b.data_ptr() - a.data_ptr() == 4096  # page-aligned first fit
    c = pool.take((4096,), torch.uint8)
    over = pool.take((10,), torch.float32)  # full: served elsewhere, never aliased
    assert not (a.data_ptr() <= over.data_ptr() < c.data_ptr() + 4096)
    pool.give([a, b, over])
    assert pool.free == [(0, 2 * 4096)]  # coalesced
    assert pool.take((2 * 1024,), torch.float32).data_ptr() == a.data_ptr()


def _unpinned(empty):
    def wrapped(*args, **kwargs):
        kwargs.pop("pin_memory", None)
        return empty(*args, **kwargs)
    return wrapped


def test_reinstall_replaces_hooks_and_bounds(shims):
    runner = FakeRunner(4, runner_v2=True)
    worker = _worker(runner)
    first = shims.generator_capture.HiddenStatesCapture.install(worker, [1])
    second = shims.generator_capture.HiddenStatesCapture.install(worker, [2, 4])
    assert not first.handles and runner.execute_model == second._execute_model
    _prompts(runner, {"r": 5})
    runner.execute_model(runner.step({"r": 5}))
    assert [t.shape[0] for t in second.collect()["r"]] == [5, 5]
    second.close()
    assert "execute_model" not in runner.__dict__  # the runner's own method again
    with pytest.raises(ValueError, match="out of bounds"):
        shims.generator_capture.HiddenStatesCapture.install(worker, [5])


def test_other_tp_ranks_capture_nothing(shims, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.distributed",
                        SimpleNamespace(get_tp_group=lambda: SimpleNamespace(rank_in_group=1)))
    runner = FakeRunner(3, runner_v2=False)
    capture = shims.generator_capture.HiddenStatesCapture.install(_worker(runner), [1])
    assert "execute_model" not in runner.__dict__ and capture.collect() is None


def test_states_cross_through_shared_memory_and_own_their_memory(shims, tmp_path):
    runner = FakeRunner(5, runner_v2=True)
    writer = shims.shared_states.SharedStatesWriter(str(tmp_path))
    capture = shims.generator_capture.HiddenStatesCapture.install(_worker(runner), [0, 5], sink=writer)
    _prompts(runner, LENGTHS)
    for counts in STEPS:
        runner.execute_model(runner.step(counts))
    reply = capture.collect()
    descriptors = [d for ds in reply.values() for d in ds]
    assert all(isinstance(d, tuple) and d[0] == shims.shared_states.TAG for d in descriptors)
    assert len(os.listdir(tmp_path)) == 6
    got = shims.shared_states.receive_states(reply)
    assert os.listdir(tmp_path) == []  # unlinked once mapped
    for rid, states in got.items():
        want = reference(runner.model.model, runner.prompts[rid])
        for lid, t in zip([0, 5], states):
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size()  # no view of a larger buffer
            torch.testing.assert_close(t, want[lid], rtol=0, atol=0)
    capture.close()


def test_shared_memory_falls_back_and_cleans_up(shims, tmp_path, monkeypatch):
    writer = shims.shared_states.SharedStatesWriter(str(tmp_path))
    job = SimpleNamespace(host=[torch.arange(6.0).reshape(2, 3)])
    kept = writer(job)
    assert len(os.listdir(tmp_path)) == 1
    writer.cleanup()  # the driver never took it (it died): the worker removes it
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(shims.shared_states, "HEADROOM", 1 << 62)  # no room: the old way
    passed = writer(job)
    assert os.listdir(tmp_path) == [] and passed[0] is not job.host[0]  # a copy: the buffer is reused
    assert torch.equal(shims.shared_states.receive_states({"r": passed})["r"][0], job.host[0])
    assert kept[0][3] == (2, 3)


def test_states_folder_comes_from_the_environment(shims, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_COMPAT_STATES_DIR", str(tmp_path))
    writer = shims.shared_states.SharedStatesWriter()
    job = SimpleNamespace(host=[torch.arange(6.0).reshape(2, 3)])
    (descriptor,) = writer(job)
    assert os.path.dirname(descriptor[1]) == str(tmp_path) and len(os.listdir(tmp_path)) == 1
    assert torch.equal(shims.shared_states.receive_states({"r": [descriptor]})["r"][0], job.host[0])
    assert os.listdir(tmp_path) == []
    monkeypatch.setenv("VLLM_COMPAT_STATES_DIR", str(tmp_path / "missing"))
    assert shims.shared_states.SharedStatesWriter().folder is None  # not a folder: the old way
