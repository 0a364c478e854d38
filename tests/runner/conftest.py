"""Fixtures of the runner tests: the tiny Llama, chat and token files, HF-extracted samples, and
a patched speculators site (real wheel via ``tests/upstream.py``, patched by vllm-compat)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

N_ROWS = 24
_UNTRAINABLE: dict[Path, str] = {}  # sites whose training classes failed the probe (probed once)


def _run_cli(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eagle3_runner", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, cwd=ROOT,
    )


@pytest.fixture(scope="session")
def run_cli():
    return _run_cli


@pytest.fixture(scope="session")
def runner_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runner")


@pytest.fixture(scope="session")
def tiny_llama(runner_root) -> Path:
    from eagle3_runner.tiny import build_tiny_llama

    return build_tiny_llama(runner_root / "tiny-llama", seed=0)


@pytest.fixture(scope="session")
def chat_rows() -> list[dict]:
    from eagle3_runner.tiny import tiny_chat_dataset

    return tiny_chat_dataset(N_ROWS, seed=3)


@pytest.fixture(scope="session")
def chat_file(runner_root, chat_rows) -> Path:
    path = runner_root / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chat_rows))
    return path


@pytest.fixture(scope="session")
def tokens_file(runner_root, tiny_llama, chat_file) -> Path:
    from eagle3_runner.prepare import prepare

    return prepare(tiny_llama, chat_file, runner_root / "tokens.jsonl", seq_length=256).output


@pytest.fixture(scope="session")
def small_tokens(runner_root, tokens_file) -> Path:
    """The first 8 token rows."""
    path = runner_root / "tokens-small.jsonl"
    path.write_text("".join(tokens_file.read_text().splitlines(keepends=True)[:8]))
    return path


@pytest.fixture(scope="session")
def hf_samples(runner_root, tiny_llama, tokens_file) -> Path:
    """``extract --backend hf`` of every token row, uninterrupted (the reference run)."""
    from eagle3_runner.extract import ExtractOptions, extract

    out = runner_root / "hf-samples"
    r = extract(ExtractOptions(model=tiny_llama, input=tokens_file, output=out, backend="hf", dtype="float32"))
    assert r.written == N_ROWS and not r.bad
    return out


def _link_vllm(site: Path) -> None:
    import upstream

    if not upstream.link_installed_vllm(site):
        pytest.skip("vLLM is not installed in this environment: no patched site for the vllm backend")


@pytest.fixture(scope="session")
def patched_site(runner_root) -> Path:
    """speculators 0.3.0 from its real wheel, with vLLM linked in, patched by vllm-compat.

    Skipped (with the reason) only when the site cannot be built: the wheel cannot be fetched
    or vLLM is not installed.  A patch that does not apply is a failure, not a skip."""
    import upstream
    from vllm_compat import api
    from vllm_compat.target import Target

    try:
        whl = upstream.wheel("speculators", "0.3.0")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"patched site not buildable: cannot fetch the speculators 0.3.0 wheel ({exc})")
    site = runner_root / "site-0.3.0"
    upstream.unpack(whl, site)
    _link_vllm(site)
    api.apply(Target.resolve(str(site)))
    report = api.verify(Target.resolve(str(site)))
    assert report.code == api.Exit.OK, report.to_dict()
    return site


@pytest.fixture(scope="session")
def train_site(patched_site) -> Path:
    """A site whose speculators training classes work; ``EAGLE3_TRAIN_SITE`` overrides it.

    Training needs speculators' config classes to work under the installed transformers.
    When they do not (a catalog patch is missing), the tests are skipped with the exact error."""
    site = Path(os.environ.get("EAGLE3_TRAIN_SITE", patched_site))
    if site in _UNTRAINABLE:
        pytest.skip(_UNTRAINABLE[site])
    probe = (
        "from eagle3_runner.train import draft_layer_config, _import_speculators\n"
        "sp = _import_speculators()\n"
        "sp['Eagle3SpeculatorConfig'](transformer_layer_config=draft_layer_config(%r, 1, 'sdpa'),"
        " draft_vocab_size=8)\n"
    )
    from eagle3_runner.tiny import build_tiny_llama

    model = site.parent / "probe-llama"
    if not model.exists():
        build_tiny_llama(model)
    proc = subprocess.run([sys.executable, "-c", probe % str(model)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(site)}, cwd=ROOT, timeout=300)
    if proc.returncode:
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "?"
        _UNTRAINABLE[site] = (f"speculators' Eagle3SpeculatorConfig cannot be built in {site} under this "
                              f"transformers (catalog patch missing): {last}")
        pytest.skip(_UNTRAINABLE[site])
    return site
