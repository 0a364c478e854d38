"""The vLLM backend (speculators' patched generator on real vLLM, CPU build) against an
independent HF reference, and the preflight that refuses an unpatched speculators site."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
import torch

from eagle3_runner.common.formats import read_token_rows

from .test_extract import reference_states, rel


def test_preflight_refuses_unpatched_site_and_prints_the_fix(runner_root, tiny_llama, small_tokens, tmp_path, capsys):
    import upstream

    from eagle3_runner.cli import main
    from eagle3_runner.extract.preflight import verify_patch_state

    from .conftest import _link_vllm

    try:
        whl = upstream.wheel("speculators", "0.3.0")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"patched site not buildable: cannot fetch the speculators 0.3.0 wheel ({exc})")
    site = upstream.unpack(whl, tmp_path / "site")
    _link_vllm(site)
    out = tmp_path / "o"
    code = main(["extract", "--model", str(tiny_llama), "--input", str(small_tokens), "--output", str(out),
                 "--site-packages", str(site)])
    err = capsys.readouterr().err
    assert code == 4, err
    fix = next(line.strip() for line in err.splitlines() if "-m vllm_compat apply" in line)
    assert shlex.split(fix)[-2:] == ["--site-packages", str(site)]
    assert not list(out.glob("data_*.pt"))
    subprocess.run(shlex.split(fix), check=True, capture_output=True)  # the printed command fixes it
    assert verify_patch_state(site).result == "ok"


def test_preflight_refuses_site_without_vllm(tiny_llama, small_tokens, tmp_path, capsys):
    """A ``pip install --target`` site holding only speculators: vllm-compat cannot see vLLM
    there and calls the site unsupported; the preflight refuses and its command fixes it."""
    import upstream
    from vllm_compat import api
    from vllm_compat.target import Target

    from eagle3_runner.cli import main
    from eagle3_runner.extract.preflight import verify_patch_state

    try:
        whl = upstream.wheel("speculators", "0.3.0")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"patched site not buildable: cannot fetch the speculators 0.3.0 wheel ({exc})")
    site = upstream.unpack(whl, tmp_path / "site")
    with pytest.raises(api.CommandError) as refused:
        api.apply(Target.resolve(str(site)))
    assert refused.value.code == api.Exit.UNSUPPORTED and "vllm is not installed" in str(refused.value)
    assert api.verify(Target.resolve(str(site))).code == api.Exit.UNSUPPORTED  # never a vacuous pass
    code = main(["extract", "--model", str(tiny_llama), "--input", str(small_tokens), "--output",
                 str(tmp_path / "o"), "--site-packages", str(site)])
    err = capsys.readouterr().err
    assert code == 4 and "sees no vLLM" in err, err
    fix = next(line.strip() for line in err.splitlines() if line.strip().startswith("ln -s "))
    subprocess.run(fix, shell=True, check=True, capture_output=True)
    state = verify_patch_state(site)
    assert "speculators.capture_convention" in state.applied


@pytest.mark.slow
@pytest.mark.parametrize("dtype,tolerance", [("float32", 1e-3), ("bfloat16", 2e-2)])
def test_vllm_backend_equals_hf(patched_site, tiny_llama, small_tokens, tmp_path, dtype, tolerance):
    from transformers import AutoModelForCausalLM

    from eagle3_runner.extract import ExtractOptions, extract

    layer_ids = [0, 2, 3, 5, 6]  # 6 = N: before the final norm
    r = extract(ExtractOptions(model=tiny_llama, input=small_tokens, output=tmp_path, layers=layer_ids,
                               backend="vllm", dtype=dtype, site_packages=str(patched_site), batch_size=3))
    assert r.written == 8 and not r.bad
    config = json.loads((tmp_path / "data_config.json").read_text())
    assert config["dtype"] == dtype and config["backend"] == "vllm"
    assert "speculators.capture_convention" in config["patches_applied"]
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.float32).eval()
    for row in read_token_rows(small_tokens):
        sample = torch.load(tmp_path / f"data_{row.index}.pt", weights_only=True)
        assert sample["input_ids"].tolist() == row.input_ids and sample["loss_mask"].tolist() == row.loss_mask
        ref = reference_states(model, row.input_ids, layer_ids)
        for lid, got, want in zip(layer_ids, sample["hidden_states"], ref):
            assert got.dtype == getattr(torch, dtype)
            assert rel(got, want) <= tolerance, (row.index, lid, rel(got, want))


@pytest.mark.slow
def test_vllm_backend_equals_the_fast_path(patched_site, tiny_llama, small_tokens, tmp_path):
    """The patched generator (states through /dev/shm) and vllm-fast (files written in the
    worker) capture with the same mechanism: the same files, within float32 rounding of two
    engines that batch the prompts differently."""
    from eagle3_runner.extract import ExtractOptions, extract

    layer_ids = [0, 2, 6]
    common = dict(model=tiny_llama, input=small_tokens, layers=layer_ids, dtype="float32", batch_size=3)
    slow = extract(ExtractOptions(output=tmp_path / "slow", backend="vllm", site_packages=str(patched_site), **common))
    fast = extract(ExtractOptions(output=tmp_path / "fast", backend="vllm-fast", **common))
    assert slow.written == fast.written == 8 and not slow.bad and not fast.bad
    for row in read_token_rows(small_tokens):
        a = torch.load(tmp_path / "slow" / f"data_{row.index}.pt", weights_only=True)
        b = torch.load(tmp_path / "fast" / f"data_{row.index}.pt", weights_only=True)
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["loss_mask"], b["loss_mask"])
        for lid, x, y in zip(layer_ids, a["hidden_states"], b["hidden_states"]):
            assert x.dtype == y.dtype == torch.float32 and x.shape == y.shape
            assert rel(x, y) <= 1e-5, (row.index, lid, rel(x, y))
