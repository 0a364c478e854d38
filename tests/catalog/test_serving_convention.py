"""vLLM's EAGLE-3 serving path, on the source of every release of the static matrix, feeds the
draft what ``eagle3`` trains it on (``scripts/serving_convention.py``): aux id ``i`` is the stream
entering decoder layer ``i``, token ``x(t+1)`` goes with the state of ``t``, and a checkpoint
without ``norm_before_residual`` would be served with ``True`` (so ``train`` must write it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "serving_convention.py"
sys.path.insert(0, str(REPO / "tests"))

from scriptkit import load_script  # noqa: E402


def _mod():
    return load_script("serving_convention")


BEFORE = """
class LlamaModel:
    def forward(self, positions, hidden_states, residual):
        aux_hidden_states = []
        for idx, layer in enumerate(self.layers):
            if idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(hidden_states + residual)
            hidden_states, residual = layer(positions, hidden_states, residual)
        return hidden_states, aux_hidden_states
"""
HELPER = """
def _maybe_add_hidden_state(self, aux_hidden_states, layer_idx, hidden_states, residual):
    if layer_idx in self.aux_hidden_state_layers:
        aux_hidden_states.append(hidden_states + residual if residual is not None else hidden_states)
    return aux_hidden_states
"""


def _after(layer_id: str) -> str:
    return f"""
class LlamaModel:
    def forward(self, positions, hidden_states, residual):
        aux_hidden_states = self._maybe_add_hidden_state([], 0, hidden_states, residual)
        for idx, layer in enumerate(self.layers):
            hidden_states, residual = layer(positions, hidden_states, residual)
            self._maybe_add_hidden_state(aux_hidden_states, {layer_id}, hidden_states, residual)
        return hidden_states, aux_hidden_states
"""


def test_the_reader_tells_the_conventions_apart():
    m = _mod()
    assert m.aux_convention(BEFORE) == "entering"
    assert m.aux_convention(_after("idx + 1"), HELPER) == "entering"
    # recording a layer's output under its own index is the other convention
    assert m.aux_convention(_after("idx"), HELPER) == "output"
    assert m.aux_convention(BEFORE.replace("hidden_states + residual", "hidden_states")) == "unknown"
    moved = BEFORE.replace(
        "            if idx in self.aux_hidden_state_layers:\n                aux_hidden_states.append(hidden_states + residual)\n"
        "            hidden_states, residual = layer(positions, hidden_states, residual)\n",
        "            hidden_states, residual = layer(positions, hidden_states, residual)\n"
        "            if idx in self.aux_hidden_state_layers:\n                aux_hidden_states.append(hidden_states + residual)\n")
    assert m.aux_convention(moved) == "output"


def test_the_reader_finds_the_norm_default():
    m = _mod()
    src = 'def update_eagle3(config_dict, c):\n    c["norm_before_residual"] = config_dict.get("norm_before_residual", True)\n'
    assert m.norm_before_residual_default(src) == "True"
    assert m.norm_before_residual_default(src.replace("True", "False")) == "False"
    assert m.norm_before_residual_default("def update_eagle3(d, c):\n    pass\n") == "not read"


@pytest.mark.slow
def test_every_release_serves_what_eagle3_trains():
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [r for r in proc.stdout.splitlines() if r.startswith("| 0.")]
    releases = load_script("static_matrix").VLLM
    assert len(rows) == len(releases) and all("| entering | yes | True |" in r for r in rows), proc.stdout


KERNEL = """
    # Shift target_input_ids by one.
    for i in range(1, query_len, BLOCK_SIZE):
        block = i + tl.arange(0, BLOCK_SIZE)
        mask = block < query_len
        input_ids = tl.load(target_input_ids_ptr + query_start + block, mask=mask)
        tl.store(draft_input_ids_ptr + query_start + block{off}, input_ids, mask=mask)

    # Copy positions.
    for i in range(0, query_len, BLOCK_SIZE):
        block = i + tl.arange(0, BLOCK_SIZE)
"""


@pytest.mark.parametrize("off,shifted", [(" - 1", True), ("", False), (" - 2", False)])
def test_the_reader_finds_model_runner_v2s_shift(off, shifted):
    """vLLM 0.34.0 serves EAGLE-3 only through Model Runner V2, whose shift is a Triton kernel."""
    assert bool(_mod().SHIFT_MRV2.search(KERNEL.format(off=off))) is shifted
