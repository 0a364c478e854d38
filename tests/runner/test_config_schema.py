"""The config's schema, walked key by key: every key of the example config, given a value of the
wrong type, stops ``eagle3 run`` before any step with one line and exit 2; the stage commands'
flags refuse the same values; the example and the schema name the same keys."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from eagle3_runner.cli import main
from eagle3_runner.config import example_config
from eagle3_runner.config.flags import add_command_flags
from eagle3_runner.config.keys import COMMANDS, SECTIONS
from eagle3_runner.config.schema import BOOL, LAYERS, SHARD, toml_text

ROOT = Path(__file__).resolve().parents[2]
EVERY_KEY = [(section, k) for section, keys in SECTIONS.items() for k in keys]


def dump(config: dict) -> str:
    """A config as TOML (scalars first, then one table per section)."""
    lines = [f"{k} = {toml_text(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for name, table in config.items():
        if isinstance(table, dict):
            lines += [f"[{name}]", *(f"{k} = {toml_text(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def example_with(tmp_path: Path, section: str, name: str, value) -> Path:
    config = tomllib.loads(example_config())
    config["workdir"] = str(tmp_path / "work")
    (config.setdefault(section, {}) if section else config)[name] = value
    path = tmp_path / "c.toml"
    path.write_text(dump(config))
    return path


def test_the_example_names_every_key_of_the_schema_and_no_other():
    text = example_config()
    named: dict[str, set[str]] = {}
    section = ""
    for line in text.splitlines():
        if m := re.match(r"^\[(\w+)\]", line):
            section = m.group(1)
        elif m := re.match(r"^#? ?(\w+) = ", line):
            named.setdefault(section, set()).add(m.group(1))
    assert named == {s: {k.name for k in keys} for s, keys in SECTIONS.items()}


@pytest.mark.parametrize("section,key", EVERY_KEY, ids=[f"{s or 'top'}.{k.name}" for s, k in EVERY_KEY])
def test_every_key_given_a_wrong_type_exits_2_before_any_step(tmp_path, capsys, section, key):
    wrong = key.wrong_value()
    assert not _accepted(key, wrong)
    path = example_with(tmp_path, section, key.name, wrong)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    where = f"[{section}] " if section else ""
    assert err == f"eagle3 run: error: {where}{key.name} = {toml_text(wrong)}: expected {key.expected}\n"
    assert not (tmp_path / "work").exists()  # nothing ran


def _accepted(key, value) -> bool:
    try:
        key.check(value)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("setting,message", [
    ('[train]\nsteps = 0', "[train] steps = 0: expected an integer >= 1"),
    ('[train]\nlr = -1', "[train] lr = -1: expected a number > 0"),
    ('[train]\nsteps = true', "[train] steps = true: expected an integer >= 1"),
    ('[prepare]\ntop_p = 1.5', "[prepare] top_p = 1.5: expected a number in (0, 1]"),
    ('[extract]\nshard = "4/4"', '[extract] shard = "4/4": expected "I/N" with 0 <= I < N'),
    ('[extract]\nlayers = [2, "x"]', '[extract] layers = [2, "x"]: expected layer ids'),
    ('[train]\nstep = 3', "[train] step: unknown key; did you mean steps?"),
    ('[trian]\nsteps = 3', "[trian]: unknown section; did you mean [train]?"),
    ("modle = 'm'", "modle: unknown key; did you mean model?"),
    ("train = 3", "train = 3: expected a table ([train])"),
])
def test_values_and_keys_refused_with_one_line(tmp_path, capsys, setting, message):
    path = tmp_path / "c.toml"
    top = 'workdir = "w"\nmodel = "m"\n'
    path.write_text(top + setting + '\n[prepare]\ndata = "d"\n' if "[prepare]" not in setting else top + setting)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"eagle3 run: error: {message}"), err
    assert not (tmp_path / "w").exists()


def test_missing_keys_and_bad_toml(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('model = "m"\n[prepare]\ndata = "d"\n')
    assert main(["run", str(path)]) == 2
    assert "workdir is required" in capsys.readouterr().err
    path.write_text('workdir = "w"\nmodel = "m"\n')
    assert main(["run", str(path)]) == 2
    assert "[prepare] needs data, synthesize, or both" in capsys.readouterr().err
    path.write_text("workdir = \n")
    assert main(["run", str(path)]) == 3
    assert "not valid TOML" in capsys.readouterr().err


def _flag_cases():
    """(command, flag, key) for every flag whose text can be wrong (not a switch, not free text)."""
    for command, groups in COMMANDS.items():
        for _title, section, names in groups:
            for k in (k for k in SECTIONS[section] if k.name in names):
                if k.kind is not BOOL and (k.kind.parse is not str or k.choices or k.kind in (LAYERS, SHARD)):
                    yield command, k.option, k


REQUIRED_ARGS = {"prepare": ["--model", "m", "--output", "o"], "extract": ["--model", "m", "--input", "i", "--output", "o"],
                 "vocab": ["--freq", "f", "--output", "o"],
                 "train": ["--data", "d", "--vocab", "v", "--verifier", "m", "--output", "o"],
                 "serve-check": ["--draft", "d"]}


@pytest.mark.parametrize("command,flag,key", list(_flag_cases()), ids=[f"{c} {f}" for c, f, _ in _flag_cases()])
def test_the_stage_commands_flags_refuse_what_the_config_refuses(capsys, command, flag, key):
    wrong = key.wrong_value()
    text = "7" if key.choices else str(wrong)
    with pytest.raises(SystemExit) as exc:
        main([command, *REQUIRED_ARGS[command], flag, text])
    assert exc.value.code == 2
    assert f"argument {flag}: got {text!r}, expected {key.expected}" in capsys.readouterr().err


def test_every_flag_of_a_stage_command_is_a_key_with_a_flag():
    import argparse

    for command in COMMANDS:
        parser = argparse.ArgumentParser()
        add_command_flags(parser, command)  # raises on a repeated flag
    flagged = {(s, n) for groups in COMMANDS.values() for _t, s, names in groups for n in names}
    for section, k in EVERY_KEY:
        assert ((section, k.name) in flagged) == (k.flag is not None), (section, k.name)


@pytest.mark.parametrize("section,name,value", [("train", "steps", "many"), ("prepare", "seq_length", "long"),
                                                ("extract", "batch_size", "big")])
def test_as_a_process_one_line_and_no_traceback(tmp_path, section, name, value):
    path = example_with(tmp_path, section, name, value)
    p = subprocess.run([sys.executable, "-m", "eagle3_runner", "run", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and p.stderr == f'eagle3 run: error: [{section}] {name} = "{value}": expected an ' \
        f"integer >= {2 if name == 'seq_length' else 1}\n" and not p.stdout, p.stderr
    assert not (tmp_path / "work").exists()
