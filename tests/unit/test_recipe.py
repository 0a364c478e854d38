"""The training recipe's pieces that need no speculators: steps from epochs, warm-up, the best
weights kept, the step clock, the automatic draft vocabulary, import failures named, prompt rows,
and the synthesized turns' filter."""

from __future__ import annotations

import logging

import pytest

from eagle3_runner.common.errors import UsageError


def test_warmup_is_a_share_below_one_and_a_count_from_one():
    from eagle3_runner.train import warmup_steps

    assert warmup_steps(0.05, 1000) == 50
    assert warmup_steps(0.05, 10) == 1  # at least one step
    assert warmup_steps(30, 1000) == 30 and warmup_steps(30, 12) == 12  # never past the run
    with pytest.raises(UsageError):
        warmup_steps(-1, 10)


def test_epochs_resolve_to_whole_passes_over_the_sampler():
    from eagle3_runner.train import TrainOptions, resolve_steps

    class Sampler:  # three packed batches per epoch, as a batch sampler yields them
        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __iter__(self):
            return iter([[0, 1], [2], [3, 4]])

    base = TrainOptions(data=".", vocab=".", verifier=".", output=".", steps=7)
    assert resolve_steps(base, Sampler()) == 7
    assert resolve_steps(TrainOptions(**{**base.__dict__, "epochs": 2}), Sampler()) == 6
    assert resolve_steps(TrainOptions(**{**base.__dict__, "epochs": 1.5}), Sampler()) == 5  # rounded up
    with pytest.raises(UsageError):
        resolve_steps(TrainOptions(**{**base.__dict__, "epochs": 0}), Sampler())


class _Report:
    def __init__(self, length: float) -> None:
        self.mean_acceptance_length = length
        self.acceptance_per_position = [length - 1]
        self.walk = type("W", (), {"drafts": 10})()


class _Scores:
    """Held-out scores in a fixed order (the scorer is a dependency of what is tested here)."""

    def __init__(self, lengths: list[float]) -> None:
        self.lengths = list(lengths)

    def score(self, model):  # noqa: ANN001
        return _Report(self.lengths.pop(0))


def test_the_best_weights_seen_are_the_ones_restored(tmp_path):
    import torch

    from eagle3_runner.train.bookkeeping import BestKeeper

    model = torch.nn.Linear(2, 2)
    keeper = BestKeeper(_Scores([1.5, 2.1, 1.8, 1.7]), every=10, log_path=tmp_path / "evals.jsonl")
    weights = {}
    for step in (10, 20, 30):
        with torch.no_grad():
            model.weight.fill_(step)
        keeper.maybe(model, step)
        weights[step] = model.weight.detach().clone()
    keeper.maybe(model, 35)  # fewer than `every` steps since the last: not scored
    with torch.no_grad():
        model.weight.fill_(40)
    keeper.restore_best(model, 40)  # scores the final weights (1.7), keeps step 20's (2.1)
    assert keeper.best_step == 20 and torch.equal(model.weight, weights[20])
    logged = [line for line in (tmp_path / "evals.jsonl").read_text().splitlines() if line]
    assert len(logged) == 4 and '"step": 40' in logged[-1]


def test_the_last_weights_stay_when_they_are_the_best(tmp_path):
    import torch

    from eagle3_runner.train.bookkeeping import BestKeeper

    model = torch.nn.Linear(2, 2)
    keeper = BestKeeper(_Scores([1.2, 1.9]), every=5, log_path=tmp_path / "evals.jsonl")
    keeper.maybe(model, 5)
    with torch.no_grad():
        model.weight.fill_(3.0)
    keeper.restore_best(model, 10)
    assert keeper.best_step == 10 and bool((model.weight == 3.0).all())


def test_the_step_clock_logs_the_rate_and_an_eta(caplog):
    from eagle3_runner.train.bookkeeping import StepClock

    caplog.set_level(logging.INFO, logger="eagle3_runner.train.bookkeeping")
    clock = StepClock(total=10, every=5)
    for step in range(10):
        clock.tick(step, 1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("step 1/10 loss 1.0000 (first step")
    assert any("step 5/10" in x and "s/step, ETA" in x for x in lines)
    assert any(x.startswith("step 10/10") and "ETA 0m00s" in x for x in lines)


def test_the_automatic_draft_vocabulary_holds_99_percent_in_whole_kilotokens():
    from eagle3_runner.train.vocab import auto_draft_vocab_size

    counts = {t: 1000 for t in range(1500)}  # 1,500 equally likely tokens: 99% needs 1,485 of them
    counts.update({t: 1 for t in range(1500, 3000)})
    assert auto_draft_vocab_size(counts, 49152) == 2048
    assert auto_draft_vocab_size({1: 5}, 512) == 512  # never above the verifier's vocabulary
    assert auto_draft_vocab_size({}, 49152) == 1024


def test_an_import_failure_names_the_missing_dependency():
    from eagle3_runner.train.vocab import import_failure

    dep = ModuleNotFoundError("No module named 'datasets'", name="datasets")
    assert "needs 'datasets', which is not installed" in import_failure("speculators.train.vocab_mapping", dep)
    own = ModuleNotFoundError("No module named 'speculators'", name="speculators")
    assert "speculators is not installed" in import_failure("speculators.train.vocab_mapping", own)
    assert "(ValueError: bad)" in import_failure("speculators.x", ValueError("bad"))


def test_prompt_rows_are_accepted_only_when_the_answers_are_regenerated(tmp_path):
    from eagle3_runner.prepare.readers import read_rows

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "Hi"}]}\n'
                    '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}\n')
    strict = read_rows(path)
    assert len(strict.rows) == 1 and "must end with an assistant turn" in strict.bad[0].reason
    open_ = read_rows(path, open_ended=True)
    assert not open_.bad and open_.rows[0].messages[-1] == {"role": "assistant", "content": ""}
    assert open_.rows[1].messages[-1]["content"] == "Yo"  # a finished conversation is unchanged


def test_synthesized_turns_are_dropped_when_empty_repeated_or_overlong():
    from eagle3_runner.prepare.synthesize import DUPLICATE, EMPTY, KEPT, OVERLONG, classify, fold

    seen = {fold("What is tea?")}
    assert classify("  what IS\n tea? ", "stop", seen) == DUPLICATE
    assert classify(" \n ", "stop", seen) == EMPTY
    assert classify("How do I brew it?", "length", seen) == OVERLONG
    assert classify("How do I brew it?", "stop", seen) == KEPT


def test_the_user_turn_prefix_is_the_template_up_to_the_users_words():
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    from eagle3_runner.common.errors import EnvironmentProblem
    from eagle3_runner.prepare.synthesize import user_turn_prefix

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")))
    tok.chat_template = ("<s>sys: be brief</s>{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
                         "</{{ m['role'] }}>{% endfor %}")
    assert user_turn_prefix(tok) == "<s>sys: be brief</s><user>"
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{% endfor %}"  # drops the content
    with pytest.raises(EnvironmentProblem, match="does not write the user's message"):
        user_turn_prefix(tok)
