"""The agreed length of aggregation intervals (pipeline/interval_stretch.py): each rank's proposal
from its own pace, the agreement every rank reaches from the summed proposals, and the router's
intervals on simulated ranks (tests/fakes.py; the real collective: tests/jobs/test_msrun_jobs.py)."""

from __future__ import annotations

import numpy as np
from fakes import LOSS, dp_metrics, make_job, train

from mindformers_tbplugin.pipeline.interval_stretch import MAX_INTERVAL_STEPS, IntervalStretch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def proposal_after(stretch: IntervalStretch, clock: Clock, steps: int, seconds_per_step: float) -> int:
    """The proposal after ``steps`` steps of the interval started by the last agreement."""
    stretch.agree(1.0, 1)
    clock.now += steps * seconds_per_step
    return int(stretch.proposal(steps)[0])


def test_a_rank_proposes_enough_intervals_to_last_the_target_at_its_pace() -> None:
    clock = Clock()
    stretch = IntervalStretch(10, 2.0, clock)
    assert proposal_after(stretch, clock, 10, 0.025) == 8  # 80 steps of 25 ms last 2 s
    assert proposal_after(stretch, clock, 10, 1.0) == 1  # 10 steps already last 10 s
    assert proposal_after(stretch, clock, 10, 0.001) == MAX_INTERVAL_STEPS // 10  # capped at 100 steps
    assert IntervalStretch(200, 2.0, clock).most == 1  # an interval longer than the cap never stretches
    off = IntervalStretch(10, 0.0, clock)
    assert proposal_after(off, clock, 10, 0.001) == 1 and off.agree(8 * 3, 3) == 1


def test_every_rank_agrees_on_the_rounded_up_mean_and_restarts_its_clock() -> None:
    clock = Clock()
    stretch = IntervalStretch(10, 2.0, clock)
    assert stretch.agree(8 + 3, 2) == 6 and stretch.factor == 6
    clock.now += 60 * 0.025  # the 60 steps of the agreed interval, at 25 ms
    assert int(stretch.proposal(60)[0]) == 8


def test_the_summed_proposals_are_the_same_whatever_order_the_ranks_are_added_in() -> None:
    proposals = np.random.default_rng(0).integers(1, 11, size=8192).astype(np.float32)
    sums = {float(np.sum(np.random.default_rng(seed).permutation(proposals), dtype=np.float32)) for seed in range(5)}
    assert len(sums) == 1
    factors = {IntervalStretch(10, 2.0).agree(total, 8192) for total in sums}
    assert factors == {int(np.ceil(proposals.sum(dtype=np.float64) / 8192))}


def test_fast_steps_stretch_the_routers_interval_and_every_step_is_still_averaged() -> None:
    # Simulated steps take microseconds: after the first interval every rank proposes the most.
    ranks = make_job(2, aggregate_every=4, aggregate_seconds=2.0)
    train(ranks, range(1, 31), dp_metrics)
    assert [rank.collectives.calls for rank in ranks] == [2, 2]  # at step 4, then at the end (30 < 4 + 100)
    first, stretched = ranks[0].collectives.sizes
    assert stretched > first and ranks[0].collectives.sizes == ranks[1].collectives.sizes
    assert ranks[0].main.series(LOSS) == [(step, step + 1.5) for step in range(1, 31)]
    assert ranks[0].main.series("train/loss_max") == [(step, step + 2.5) for step in range(1, 31)]


def test_steps_slower_than_the_target_keep_intervals_of_aggregate_every() -> None:
    ranks = make_job(2, aggregate_every=4, aggregate_seconds=1e-9)
    train(ranks, range(1, 13), dp_metrics)
    assert [rank.collectives.calls for rank in ranks] == [3, 3]  # at 4, 8 and 12
    assert ranks[0].main.series(LOSS) == [(step, step + 1.5) for step in range(1, 13)]
