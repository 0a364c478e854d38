"""vocab: d2t/t2d in speculators' format from prepare's frequencies."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eagle3_runner.errors import BadInput, UsageError
from eagle3_runner.formats import write_freq
from eagle3_runner.vocab import build_vocab, load_vocab


def test_most_frequent_tokens_kept_and_offsets_map_back(tmp_path):
    counts = {7: 50, 3: 40, 11: 40, 2: 1, 30: 9}
    freq = tmp_path / "f.json"
    write_freq(freq, counts, 32)
    r = build_vocab(freq, None, 4, tmp_path / "v")
    d2t = np.load(tmp_path / "v" / "d2t.npy")
    t2d = np.load(tmp_path / "v" / "t2d.npy")
    assert d2t.dtype == np.int64 and t2d.dtype == np.bool_ and t2d.shape == (32,) and d2t.shape == (4,)
    kept = sorted(i + int(d2t[i]) for i in range(4))  # target id = draft id + d2t[draft id]
    assert kept == [3, 7, 11, 30]  # the 4 most frequent (ties by id), in id order
    assert np.flatnonzero(t2d).tolist() == kept
    assert r.coverage == pytest.approx(139 / 140)
    assert json.loads((tmp_path / "v" / "vocab_config.json").read_text())["target_vocab_size"] == 32


def test_padding_with_lowest_unused_ids_and_roundtrip(tmp_path):
    freq = tmp_path / "f.json"
    write_freq(freq, {5: 3}, 16)
    build_vocab(freq, 16, 3, tmp_path / "v")
    d2t, t2d = load_vocab(tmp_path / "v")
    assert (d2t + __import__("torch").arange(3)).tolist() == [0, 1, 5]
    assert int(t2d.sum()) == 3


def test_bad_sizes_and_ids(tmp_path, tokens_file):
    from eagle3_runner.formats import freq_path_for

    with pytest.raises(UsageError):
        build_vocab(freq_path_for(tokens_file), 512, 600, tmp_path / "v")
    with pytest.raises(BadInput, match="outside the target vocabulary"):
        build_vocab(freq_path_for(tokens_file), 100, 50, tmp_path / "v")
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(BadInput):
        build_vocab(tmp_path / "junk.json", 512, 10, tmp_path / "v")
