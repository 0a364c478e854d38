"""``prepare --synthesize N --synthesize-starts FILE|NAME``: which samples take a start and which,
the starts' file format, bad values refused (usage error), and the ``[prepare]`` keys."""

from __future__ import annotations

import pytest

from eagle3_runner.common.errors import UsageError
from eagle3_runner.prepare.synthesize import (EMPTY, KEPT, SynthesizeOptions, _check, classify, load_starts,
                                              synthesize_options)


@pytest.mark.parametrize("share", [1.0, 0.5, 0.4, 0.25, 0.01])
def test_the_share_is_spread_evenly_and_the_starts_taken_in_turn(share):
    o = SynthesizeOptions(count=1, starts=("a", "b", "c"), starts_share=share)
    opening = [o.start(i) for i in range(1000)]
    steered = [s for s in opening if s]
    assert len(steered) == round(1000 * share)
    assert steered[:6] == ["a", "b", "c", "a", "b", "c"][: len(steered[:6])]
    # no run of free samples longer than the share implies
    gaps = [len(run) for run in "".join("x" if s else "." for s in opening).split("x")]
    assert max(gaps) <= int(1 / share)


def test_without_starts_every_sample_is_free():
    assert {SynthesizeOptions(count=1).start(i) for i in range(50)} == {""}


def test_a_turn_that_is_its_start_alone_is_empty():
    assert classify("Write a function  ", "stop", set(), "Write a function") == EMPTY
    assert classify("Write a function that adds", "stop", set(), "Write a function") == KEPT


def test_starts_file_built_in_and_errors(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("# a comment\nFirst start\n\n  Second start  \n")
    assert load_starts(str(f)) == ("First start", "Second start")
    code = load_starts("code")
    assert len(code) >= 20 and all(s and not s.startswith("#") for s in code)
    with pytest.raises(UsageError, match="built-in list"):
        load_starts(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    with pytest.raises(UsageError, match="no starts"):
        load_starts(str(tmp_path / "empty.txt"))
    for share in (0.0, 1.5, -1):
        with pytest.raises(UsageError, match="share"):
            _check(SynthesizeOptions(count=1, starts=("a",), starts_share=share))


def test_options_from_prepare_keys_and_arguments(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("Only start\n")
    o = synthesize_options({"synthesize": 7, "synthesize_starts": str(f), "synthesize_starts_share": 0.5,
                            "synthesize_temperature": None, "seed": 3}, batch_size=16)
    assert (o.count, o.starts, o.starts_share, o.seed, o.batch_size) == (7, ("Only start",), 0.5, 3, 16)
    assert o.temperature == SynthesizeOptions(count=1).temperature
    assert synthesize_options({"synthesize": 2}).starts == ()


def test_run_config_takes_the_keys_and_resolves_the_file(tmp_path):
    from eagle3_runner.run import load_config

    (tmp_path / "starts.txt").write_text("A start\n")
    cfg = tmp_path / "run.toml"
    cfg.write_text('workdir = "w"\nmodel = "m"\n[prepare]\nsynthesize = 4\nsynthesize_starts = "starts.txt"\n'
                   'synthesize_starts_share = 0.5\n')
    prep = load_config(cfg).prepare
    assert prep["synthesize_starts"] == str(tmp_path / "starts.txt") and prep["synthesize_starts_share"] == 0.5
    cfg.write_text('workdir = "w"\nmodel = "m"\n[prepare]\nsynthesize = 4\nsynthesize_starts = 3\n')
    with pytest.raises(UsageError, match="synthesize_starts"):
        load_config(cfg)
