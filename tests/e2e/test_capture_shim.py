"""The vendored capture (``patches/shims/capture.py``) on a toy model, without vLLM engines.

What the CPU build cannot run: Model Runner V2 (GPU only; no ``input_batch``, requests sorted per
step by scheduled-token count).  A fake worker reproduces both runners' layouts around a toy
residual-stream model, so per-request attribution, chunking, padding rows, the capture
convention (input of layer i, id N = last layer's output before the final norm) and the
"record only inside execute_model" rule are checked for both.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

SHIM = Path(__file__).resolve().parents[2] / "patches" / "shims" / "capture.py"


@pytest.fixture
def capture_mod(monkeypatch):
    spec = importlib.util.spec_from_file_location("_vllm_compat_capture_under_test", SHIM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fake = SimpleNamespace(get_tp_group=lambda: SimpleNamespace(rank_in_group=0))
    monkeypatch.setitem(sys.modules, "vllm.distributed", fake)
    return mod


class Layer(torch.nn.Module):
    """vLLM-style decoder layer: (positions, hidden_states, residual) -> (out, residual)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, positions, hidden_states, residual):
        stream = hidden_states.clone() if residual is None else hidden_states + residual
        # in-place damage to the inputs, as fused add+norm kernels do
        hidden_states.mul_(0)
        return torch.tanh(stream * (self.k + 1)) + positions[:, None], stream


class Base(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(k) for k in range(n))

    def forward(self, x, positions):
        h, r = x, None
        for layer in self.layers:
            h, r = layer(positions, h, r)
        return h + r


def reference(x: torch.Tensor, positions: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Residual stream entering each layer, then after the last layer (ids 0..n)."""
    out, h, r = [], x, None
    for k in range(n):
        stream = h if r is None else h + r
        out.append(stream.clone())
        h, r = torch.tanh(stream * (k + 1)) + positions[:, None], stream
    out.append(h + r)
    return out


class FakeWorker:
    """Runs ``Base`` over a step's requests laid out as the given runner would."""

    def __init__(self, n: int, runner_v2: bool, pad: int = 3) -> None:
        self.model = SimpleNamespace(model=Base(n))
        self.runner_v2 = runner_v2
        self.pad = pad
        self.model_runner = SimpleNamespace(model=self.model)
        if not runner_v2:
            self.model_runner.input_batch = SimpleNamespace(req_ids=[], num_reqs=0)
        self.tokens: dict[str, torch.Tensor] = {}  # request -> full prompt embeddings
        self.done: dict[str, int] = {}

    def execute_model(self, scheduler_output):
        counts = scheduler_output.num_scheduled_tokens
        if self.runner_v2:  # Model Runner V2: sorted by scheduled tokens, per step
            order = sorted(counts, key=counts.get)
        else:  # V1: persistent batch order (here: reversed insertion, to differ from input)
            order = list(reversed(list(counts)))
        rows, pos, qsl = [], [], [0]
        for rid in order:
            start = self.done.get(rid, 0)
            rows.append(self.tokens[rid][start : start + counts[rid]])
            pos.append(torch.arange(start, start + counts[rid], dtype=torch.float32))
            qsl.append(qsl[-1] + counts[rid])
            self.done[rid] = start + counts[rid]
        x = torch.cat(rows + [torch.zeros(self.pad, rows[0].shape[1])])  # padding rows
        positions = torch.cat(pos + [torch.zeros(self.pad)])
        if self.runner_v2:
            batch = SimpleNamespace(req_ids=order, query_start_loc_np=np.array(qsl))
            self.model_runner.execute_model_state = SimpleNamespace(input_batch=batch)
        else:
            self.model_runner.input_batch = SimpleNamespace(req_ids=order + [None], num_reqs=len(order))
        self.model.model(x, positions)
        return None


@pytest.mark.parametrize("runner_v2", [False, True], ids=["v1-runner", "model-runner-v2"])
def test_per_request_states_follow_the_convention(capture_mod, runner_v2):
    n, hidden = 5, 8
    worker = FakeWorker(n, runner_v2)
    layer_ids = [0, 2, n]
    capture = capture_mod.HiddenStatesCapture.install(worker, layer_ids)
    torch.manual_seed(0)
    lengths = {"req_0_0": 11, "req_0_1": 4, "req_0_2": 23}
    for rid, length in lengths.items():
        worker.tokens[rid] = torch.randn(length, hidden)

    # Dummy/warm-up forward outside execute_model: must not be recorded.
    worker.model.model(torch.randn(6, hidden), torch.zeros(6))
    # Three steps with chunked prefill: budgets of 10 tokens.
    steps = [{"req_0_0": 10}, {"req_0_0": 1, "req_0_1": 4, "req_0_2": 5}, {"req_0_2": 10}, {"req_0_2": 8}]
    for counts in steps:
        worker.execute_model(SimpleNamespace(num_scheduled_tokens=counts))

    got = capture.collect()
    assert sorted(got) == ["req_0_0", "req_0_1", "req_0_2"]
    for rid, length in lengths.items():
        want = reference(worker.tokens[rid], torch.arange(length, dtype=torch.float32), n)
        assert len(got[rid]) == len(layer_ids)
        for lid, tensor in zip(layer_ids, got[rid]):
            assert tensor.shape == (length, hidden)
            torch.testing.assert_close(tensor, want[lid])
    assert capture.collect() is None  # collected once


def test_prefill_limits_drop_decode_tokens(capture_mod):
    worker = FakeWorker(3, runner_v2=False, pad=0)
    capture = capture_mod.HiddenStatesCapture.install(worker, [1])
    worker.tokens = {"a": torch.randn(6, 4), "b": torch.randn(6, 4)}
    worker._current_request_metadata = {"a": 4, "b": 6}  # speculators 0.4.0's per-step counts
    worker.execute_model(SimpleNamespace(num_scheduled_tokens={"a": 6, "b": 6}))
    got = capture.collect()
    assert got["a"][0].shape[0] == 4 and got["b"][0].shape[0] == 6
    assert worker._current_request_metadata is None


def test_reinstall_replaces_hooks_and_bounds(capture_mod):
    worker = FakeWorker(4, runner_v2=True)
    first = capture_mod.HiddenStatesCapture.install(worker, [1])
    second = capture_mod.HiddenStatesCapture.install(worker, [2, 4])
    assert not first.handles and worker.execute_model == second._execute_model
    worker.tokens = {"r": torch.randn(5, 4)}
    worker.execute_model(SimpleNamespace(num_scheduled_tokens={"r": 5}))
    got = second.collect()
    assert [t.shape[0] for t in got["r"]] == [5, 5]
    with pytest.raises(ValueError, match="out of bounds"):
        capture_mod.HiddenStatesCapture.install(worker, [5])
