"""``eagle3 train --max-minutes``: the learning-rate schedule fitted to the time limit
(:func:`eagle3_runner.train.loop.fitted_lr_scale`).  Without time pressure it is speculators' own
schedule (transformers' warm-up schedules, the reference); under it, warm-up and decay follow the
time, so a run the limit stops ends at a rate of 0."""

from __future__ import annotations

import pytest

from eagle3_runner.train.loop import fitted_lr_scale


def _reference(kind: str, total: int, warmup: int) -> list[float]:
    import torch
    from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    make = get_linear_schedule_with_warmup if kind == "linear" else get_cosine_schedule_with_warmup
    sched = make(opt, warmup, total)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("kind", ["linear", "cosine"])
@pytest.mark.parametrize("total,warmup", [(200, 10), (57, 0), (30, 29)])
def test_without_time_pressure_it_is_speculators_schedule(kind, total, warmup):
    ours = [fitted_lr_scale(kind, step, total, warmup, 0.0) for step in range(total)]
    assert ours == pytest.approx(_reference(kind, total, warmup), abs=1e-12)


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_the_time_limit_brings_warm_up_and_decay_forward(kind):
    total, warmup = 10_000, 500
    # a tenth of the steps done but half the time spent: the schedule stands at its middle
    assert fitted_lr_scale(kind, 1_000, total, warmup, 0.5) == pytest.approx(fitted_lr_scale(kind, 5_000, total, warmup, 0))
    assert fitted_lr_scale(kind, 10, total, warmup, 0.025) == pytest.approx(0.5)  # in the warm-up, by time
    assert fitted_lr_scale(kind, 100, total, warmup, 1.0) == pytest.approx(0.0)
    assert fitted_lr_scale(kind, 100, total, warmup, 1.7) == pytest.approx(0.0)  # past the limit: still 0
    rates = [fitted_lr_scale(kind, s, total, warmup, s / 2_000) for s in range(500, 2_001)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))  # monotone decay


def test_a_schedule_without_decay_is_left_alone():
    assert fitted_lr_scale("none", 5, 100, 0, 0.9) is None
