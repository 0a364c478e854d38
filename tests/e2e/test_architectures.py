"""The architecture matrix at runtime: for every tiny verifier of ``eagle3_runner.tiny.arch``,
speculators' own patched generator (0.3.0, 0.4.0) and ``eagle3 extract`` with each backend
(vllm, vllm-fast, hf) return the states HF transformers computes (float32, capture convention).

Cells measure the worst ‖a−b‖/‖b‖ over every prompt and layer id and record it in
``.cache/e2e-results.json`` (``arch/...`` keys); ``scripts/arch_sweep.py`` runs every cell and
writes ``docs/architectures.md`` from those records.  By default only the CI subset runs (the
hybrid on every path, gpt-oss through the generator): ``EAGLE3_ARCH_SWEEP=1`` runs all cells.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import torch

from conftest import SPECULATORS, cases, hf_reference, record, run_generator, vllm_version
from eagle3_runner.tiny.arch import ARCHITECTURES

pytestmark = pytest.mark.slow

ARCHS = ("qwen3", "qwen3_moe", "gpt_oss", "qwen3_next")
BACKENDS = ("vllm", "vllm-fast", "hf")
GEN_CASES = ("one", "ragged3", "chunked")
# The CI subset (2 cores, 90 minutes for the whole suite): the hybrid on every path (the new
# KV-cache grouping), gpt-oss (sinks, sliding window) through speculators 0.4.0's generator.
CI = {("generator", "0.3.0", "qwen3_next"), ("generator", "0.4.0", "qwen3_next"), ("generator", "0.4.0", "gpt_oss"),
      ("extract", "vllm", "qwen3_next"), ("extract", "vllm-fast", "qwen3_next"), ("extract", "hf", "qwen3_next")}
FULL = os.environ.get("EAGLE3_ARCH_SWEEP") == "1"


def _cell(kind: str, what: str, arch: str):
    marks = [] if FULL or (kind, what, arch) in CI else [
        pytest.mark.skip(reason="full architecture sweep only (EAGLE3_ARCH_SWEEP=1, scripts/arch_sweep.py)")]
    return pytest.param(what, arch, id=f"{what}-{arch}", marks=marks)


@pytest.fixture(scope="session")
def arch_models(e2e_root):
    built: dict[str, object] = {}

    def get(name: str):
        if name not in built:
            built[name] = ARCHITECTURES[name].builder(e2e_root / f"tiny-{name}", seed=0)
        return built[name]
    return get


def _worst(results, refs) -> float:
    worst = 0.0
    for got_layers, want_layers in zip(results, refs):
        for got, want in zip(got_layers, want_layers):
            assert tuple(got.shape) == tuple(want.shape)
            worst = max(worst, float((got.float() - want).norm() / want.norm()))
    return worst


def _record(path: str, arch: str, value: dict) -> None:
    record(f"arch/vllm{vllm_version()}/{arch}/{path}", {"arch": arch, "path": path, **value})


@pytest.mark.parametrize("speculators,arch", [_cell("generator", s, a) for s in SPECULATORS for a in ARCHS])
def test_generator_equals_hf(sites, arch_models, e2e_root, speculators, arch):
    spec = ARCHITECTURES[arch]
    model = arch_models(arch)
    site, applied = sites[speculators]
    kwargs, prompts = cases(speculators)
    prompts = {k: prompts[k] for k in GEN_CASES}
    data = run_generator(site, model, kwargs, prompts, e2e_root / f"arch-{speculators}-{arch}.pt")
    errors = {}
    for case, want in prompts.items():
        results = data["cases"][case]["results"]
        assert [r["input_ids"].tolist() for r in results] == want, f"{case}: results not in input order"
        refs = hf_reference(model, want, data["layer_ids"])
        errors[case] = _worst([r["hidden_states"] for r in results], refs)
    worst = max(errors.values())
    _record(f"generator-{speculators}", arch, {
        "max_rel_err": worst, "tolerance": spec.tolerance, "dtype": "auto (bfloat16)", "errors": errors,
        "layer_ids": data["layer_ids"], "wall_s": round(data["wall_s"], 1),
        "patches": [p for p in applied if "kv_cache" in p or "scheduler" in p]})
    assert worst <= spec.tolerance, f"{arch} speculators {speculators}: rel. error {worst:.3g} ({errors})"


@pytest.fixture(scope="session")
def arch_tokens(e2e_root, arch_models):
    """Per architecture: its chat rows rendered with its own template (Qwen3 thinking, harmony)."""
    from eagle3_runner.prepare import prepare
    from eagle3_runner.tiny import tiny_chat_dataset

    chat = e2e_root / "arch-chat.jsonl"
    chat.write_text("".join(json.dumps(r) + "\n" for r in tiny_chat_dataset(6, seed=5)))
    done: dict[str, object] = {}

    def get(name: str):
        if name not in done:
            done[name] = prepare(arch_models(name), chat, e2e_root / f"arch-tokens-{name}.jsonl", seq_length=256).output
        return done[name]
    return get


@pytest.mark.parametrize("backend,arch", [_cell("extract", b, a) for b in BACKENDS for a in ARCHS])
def test_extract_equals_hf(sites, arch_models, arch_tokens, e2e_root, backend, arch):
    from transformers import AutoConfig

    from eagle3_runner.extract import ExtractOptions, extract
    from eagle3_runner.common.formats import read_token_rows

    spec = ARCHITECTURES[arch]
    model, tokens = arch_models(arch), arch_tokens(arch)
    n = AutoConfig.from_pretrained(model).num_hidden_layers
    layer_ids = [1, n // 2, n - 1, n]
    # float32 wherever the CPU build runs the architecture in float32 (HF always can)
    dtype = "float32" if spec.fp32_tolerance is not None or backend == "hf" else "bfloat16"
    tolerance = (spec.fp32_tolerance or 1e-3) if dtype == "float32" else spec.tolerance
    site = str(sites["0.3.0"][0]) if backend == "vllm" else None
    out = e2e_root / f"arch-extract-{backend}-{arch}"
    t0 = time.perf_counter()
    r = extract(ExtractOptions(model=model, input=tokens, output=out, layers=layer_ids, backend=backend,
                               dtype=dtype, site_packages=site, batch_size=3))
    wall = time.perf_counter() - t0
    rows = read_token_rows(tokens)
    assert r.written == len(rows) and not r.bad
    got, prompts = [], []
    for row in rows:
        sample = torch.load(out / f"data_{row.index}.pt", weights_only=True)
        assert sample["input_ids"].tolist() == row.input_ids and sample["loss_mask"].tolist() == row.loss_mask
        assert sum(row.loss_mask) > 0  # the template's generation markers gave the assistant turns
        got.append(sample["hidden_states"])
        prompts.append(row.input_ids)
    worst = _worst(got, hf_reference(model, prompts, layer_ids))
    _record(f"extract-{backend}", arch, {"max_rel_err": worst, "tolerance": tolerance, "dtype": dtype,
                                         "layer_ids": layer_ids, "wall_s": round(wall, 1)})
    assert worst <= tolerance, f"{arch} extract --backend {backend} ({dtype}): rel. error {worst:.3g}"
