"""Errors a user meets first: a model folder that is missing, empty or not a model (one line,
exit 6, before anything loads it), and ``--json`` errors as one JSON object on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3_runner.cli import main
from eagle3_runner.common.model_folder import check_model_folder


def folders(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Bad model folders and the line each gets."""
    empty, no_config, no_tokenizer, file = (tmp_path / n for n in ("empty", "weights", "notok", "file"))
    empty.mkdir()
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"")
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_text("{}")
    file.write_text("")
    return {
        "missing": (tmp_path / "nonexistent", f"folder not found: {tmp_path / 'nonexistent'}"),
        "empty": (empty, f"folder is empty: {empty}"),
        "no config": (no_config, f"no config.json in {no_config}: not a Hugging Face model folder"),
        "no tokenizer": (no_tokenizer, f"no tokenizer files in {no_tokenizer} (looked for tokenizer.json"),
        "a file": (file, f"is not a folder: {file}"),
    }


CASES = ["missing", "empty", "no config", "no tokenizer", "a file"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("argv,flag", [
    (["prepare", "--data", "d.jsonl", "--output", "o.jsonl"], "--model"),
    (["extract", "--input", "t.jsonl", "--output", "hs"], "--model"),
    (["serve-check", "--draft", "ckpt"], "--verifier"),
])
def test_a_bad_model_folder_gets_one_line_and_exit_6(tmp_path, capsys, case, argv, flag):
    folder, line = folders(tmp_path)[case]
    assert main([*argv, flag, str(folder)]) == 6
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and line in err[0], err


@pytest.mark.parametrize("argv", [["vocab", "--freq", "f.json", "--output", "v"],
                                  ["train", "--data", "hs", "--vocab", "v", "--output", "ckpt"],
                                  ["eval", "--draft", "ckpt"]])
def test_a_verifier_needs_its_config_not_a_tokenizer(tmp_path, capsys, argv):
    bad = folders(tmp_path)
    for case in ("missing", "empty", "no config", "a file"):
        folder, line = bad[case]
        assert main([*argv, "--verifier", str(folder)]) == 6
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and line in err[0], err
    check_model_folder(bad["no tokenizer"][0], tokenizer=False)  # enough for these commands


def test_run_checks_its_model_before_any_step(tmp_path, capsys):
    folder, line = folders(tmp_path)["no tokenizer"]
    path = tmp_path / "c.toml"
    path.write_text(f'workdir = "w"\nmodel = "{folder}"\n[prepare]\ndata = "d.jsonl"\n')
    assert main(["run", str(path)]) == 6
    assert line in capsys.readouterr().err and not (tmp_path / "w").exists()


@pytest.mark.parametrize("argv,code,result", [
    (["eval", "--draft", "/nonexistent"], 3, "bad_input"),  # an error of the command
    (["serve-check", "--draft", "d", "--verifier", "/nonexistent"], 6, "environment"),  # the folder check
    (["serve-check", "--draft", "d", "-k", "many"], 2, "usage"),  # argparse's own
    (["serve-check", "--draft", "d", "--dtype", "float8"], 2, "usage"),  # the schema's flag check
    (["eval"], 2, "usage"),  # a missing argument
])
def test_json_errors_are_one_json_object_on_stdout(capsys, argv, code, result):
    assert main([*argv, "--json"]) == code
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["exit_code"] == code and report["result"] == result and report["error"], report
    assert err == ""


def test_counts_agree_with_their_noun():
    from eagle3_runner.common.formats import counted
    from eagle3_runner.prepare.readers import bad_rows_error

    assert [counted(n, "bad rows") for n in (0, 1, 2)] == ["0 bad rows", "1 bad row", "2 bad rows"]
    assert str(bad_rows_error(["f.jsonl:3: no messages"])).startswith("1 bad row:\n")


def test_the_loss_plot_counts_steps_as_the_log_does():
    from eagle3_runner.common.plot import loss_plot, loss_table

    losses = [3.0, 2.0, 1.5, 1.0]
    assert loss_plot(losses).splitlines()[-1].strip() == "step 1 .. 4"  # the log: "step 1/4" .. "step 4/4"
    assert loss_table(losses).splitlines()[0].split()[:2] == ["step", "1"]


def test_the_verifier_that_extracted_samples_name_is_checked_too(tmp_path, capsys):
    """``vocab --data HS`` without ``--verifier`` takes the model HS/data_config.json names."""
    from eagle3_runner.common.formats import DATA_CONFIG, write_freq

    freq, hs = tmp_path / "t.freq.json", tmp_path / "hs"
    write_freq(freq, {1: 3, 2: 1}, 16)
    hs.mkdir()
    (hs / DATA_CONFIG).write_text(json.dumps({"model": str(tmp_path / "moved"), "layer_ids": [1, 2]}))
    assert main(["vocab", "--freq", str(freq), "--data", str(hs), "--output", str(tmp_path / "v")]) == 6
    assert f"verifier folder not found: {tmp_path / 'moved'}" in capsys.readouterr().err
