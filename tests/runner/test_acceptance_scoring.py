"""How drafts are scored offline (``eagle3_runner.evaluate``) and which prompts the served check
uses (``eagle3_runner.evaluate.serve_check``): hand-made cases whose answers are counted by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from eagle3_runner.evaluate import Acceptance, leading_matches, score_sample  # noqa: E402
from eagle3_runner.evaluate.serve_check import turn_prompts, turns_of  # noqa: E402
from eagle3_runner.train import split_files  # noqa: E402

K = 3


def _score(draft, verifier, mask):
    a, w = Acceptance(), Acceptance()
    score_sample([torch.tensor(d) for d in draft], torch.tensor(verifier), torch.tensor(mask), K, a, w)
    return a, w


def test_leading_matches_stops_at_the_first_miss():
    correct = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1], [0, 1, 1, 1]], dtype=torch.bool)
    assert leading_matches(correct, 3).tolist() == [2, 1, 0, 3]


def test_a_perfect_draft_is_accepted_everywhere_and_the_walk_jumps_k_plus_one():
    # 2 prompt tokens, then a generated turn of 10 tokens: shifted index i holds x(i+1)
    mask = [0] + [1] * 10  # x1 (prompt) .. x11; context x(i+1) generated for i >= 1
    verifier = list(range(100, 111))  # verifier[i] predicts x(i+2)
    draft = [verifier[j:] + [0] * j for j in range(K)]  # step j at i predicts verifier[i+j]
    a, w = _score(draft, verifier, mask)
    # starts i with x(i+1)..x(i+4) all generated: i = 1..7
    assert a.drafts == 7 and a.accepted == [7, 7, 7]
    # the walk: i = 1, then 1 + 4 = 5, then 9 (x(10..13) not all generated: stop)
    assert w.drafts == 2 and w.accepted == [2, 2, 2]
    assert w.mean_acceptance_length == pytest.approx(4.0)


def test_a_miss_at_step_two_counts_step_one_only_and_the_walk_moves_two():
    mask = [0] + [1] * 10
    verifier = list(range(100, 111))
    draft = [verifier[j:] + [0] * j for j in range(K)]
    draft[1] = [0] * len(verifier)  # step 2 always wrong
    a, w = _score(draft, verifier, mask)
    assert a.accepted == [a.drafts, 0, 0]
    # every draft accepts one token: starts 1, 3, 5, 7
    assert w.drafts == 4 and w.accepted == [4, 0, 0] and w.per_position == [1.0, 0.0, 0.0]


def test_drafts_are_scored_against_the_verifier_not_the_text():
    mask = [0] + [1] * 6
    verifier = [5, 6, 7, 8, 9, 10, 11]
    draft = [[v + 1 for v in verifier[j:]] + [0] * j for j in range(K)]  # always off by one
    a, w = _score(draft, verifier, mask)
    assert a.drafts > 0 and a.accepted == [0, 0, 0] and w.accepted == [0, 0, 0]


def test_every_turn_is_walked_from_its_own_start():
    # turn 1: context tokens at i = 1..5; a user turn (i = 6..8); turn 2: i = 9..14
    mask = [0] + [1] * 5 + [0] * 3 + [1] * 6
    verifier = list(range(200, 200 + len(mask)))
    draft = [verifier[j:] + [0] * j for j in range(K)]
    a, w = _score(draft, verifier, mask)
    # turn 1 starts with all 3 next tokens generated: i = 1, 2 (i + 3 <= 5); turn 2: i = 9..11
    assert a.drafts == 5
    assert w.drafts == 2  # one draft per turn (the next one would pass the turn's end)


def test_turn_prompts_end_k_minus_one_early_so_every_draft_stays_inside_the_turn():
    ids = [1, 2, 3, 10, 11, 12, 13, 14, 15, 4, 5, 20, 21, 22]
    mask = [0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1]
    assert turns_of(ids, mask) == [([1, 2, 3], 6), ([1, 2, 3, 10, 11, 12, 13, 14, 15, 4, 5], 3)]
    prompts, max_tokens = turn_prompts([(ids, mask)], K)
    # the 3-token turn leaves 1 token (no draft at all): dropped
    assert prompts == [[1, 2, 3]] and max_tokens == [4]


def test_the_held_out_split_is_seeded_and_never_empty():
    files = [f"data_{i}.pt" for i in range(25)]
    train, val = split_files(files, 0.1, seed=0)
    assert len(val) == 2 and not set(train) & set(val) and sorted(train + val) == sorted(files)
    assert split_files(files, 0.1, seed=0) == (train, val)
    assert split_files(files, 0.1, seed=1) != (train, val)
    assert split_files(files[:3], 0.1, seed=0)[1] and split_files(files[:1], 0.1, seed=0)[1] == []
    assert split_files(files, 0.0, seed=0) == (sorted(files), [])
