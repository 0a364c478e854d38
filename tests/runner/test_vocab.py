"""vocab: d2t/t2d in speculators' format from prepare's frequencies."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eagle3_runner.common.errors import BadInput, UsageError
from eagle3_runner.common.formats import write_freq
from eagle3_runner.train.vocab import build_vocab, load_vocab


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
    from eagle3_runner.common.formats import freq_path_for

    with pytest.raises(UsageError):
        build_vocab(freq_path_for(tokens_file), 512, 600, tmp_path / "v")
    with pytest.raises(BadInput, match="outside the target vocabulary"):
        build_vocab(freq_path_for(tokens_file), 100, 50, tmp_path / "v")
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(BadInput):
        build_vocab(tmp_path / "junk.json", 512, 10, tmp_path / "v")


def test_ranked_by_the_verifiers_top1_the_draft_vocab_covers_what_must_be_accepted(tmp_path, tiny_llama, tokens_file,
                                                                                  hf_samples):
    """On the tiny random verifier and the chat set's own answers, the text's most frequent
    tokens miss many of the verifier's greedy predictions; ranking by those predictions first
    covers them (a draft token outside the vocabulary can never be accepted)."""
    from eagle3_runner.common.formats import freq_path_for
    from eagle3_runner.train.vocab import verifier_top1_counts

    freq = freq_path_for(tokens_file)
    by_text = build_vocab(freq, None, 128, tmp_path / "text")
    by_verifier = build_vocab(freq, None, 128, tmp_path / "verifier", data=hf_samples)
    top1, verifier = verifier_top1_counts(hf_samples)
    assert verifier == tiny_llama and sum(top1.values()) > 0
    _, t2d_text = load_vocab(tmp_path / "text")
    covered_by_text = sum(c for t, c in top1.items() if t2d_text[t]) / sum(top1.values())
    assert by_text.verifier_top1_coverage is None
    assert by_verifier.verifier_top1_coverage > covered_by_text + 0.1, (by_verifier, covered_by_text)
    ranked = sorted(top1, key=lambda t: (-top1[t], t))[:128]
    _, t2d = load_vocab(tmp_path / "verifier")
    assert all(t2d[t] for t in ranked)  # the verifier's 128 most predicted tokens are all in
    cfg = json.loads((tmp_path / "verifier" / "vocab_config.json").read_text())
    assert cfg["ranked_by"].startswith("verifier top-1") and cfg["verifier_top1_coverage"] == by_verifier.verifier_top1_coverage


def test_vocab_from_samples_without_the_last_layer_is_refused(tmp_path, tiny_llama, tokens_file, hf_samples):
    from eagle3_runner.common.formats import DATA_CONFIG, freq_path_for

    data = tmp_path / "samples"
    data.mkdir()
    cfg = json.loads((hf_samples / DATA_CONFIG).read_text())
    cfg["layer_ids"] = cfg["layer_ids"][:-1] + [cfg["layer_ids"][-1] - 1]
    (data / DATA_CONFIG).write_text(json.dumps(cfg))
    with pytest.raises(BadInput, match="not the verifier's last layer"):
        build_vocab(freq_path_for(tokens_file), None, 64, tmp_path / "v", data=data)
    assert not (tmp_path / "v").exists()
