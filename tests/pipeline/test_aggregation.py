"""Aggregation arithmetic of pipeline/aggregation.py, without MindSpore: the collective's own effect (an
element-wise sum, or stacking rows) is applied with numpy to several ranks' packed vectors. The
real collectives are exercised by tests/jobs/test_msrun_jobs.py under msrun."""

from __future__ import annotations

import math

import numpy as np

from mindformers_tbplugin.pipeline.aggregation import (
    MAX_DATA_TAGS,
    DataAggregator,
    JobThroughput,
    LossAggregator,
    SystemSummary,
)
from mindformers_tbplugin.pipeline.topology import Topology


def _topology(rank: int, world: int, stages: int = 1) -> Topology:
    return Topology(rank, world, stages, "data_parallel", False, world > 1)


def _reduce(aggregators: list[DataAggregator], holds: list[bool]):
    packed = [agg.pack(hold) for agg, hold in zip(aggregators, holds, strict=True)]
    total = np.sum([vector for vector, _ in packed], axis=0, dtype=np.float32)
    return aggregators[0].unpack(total, packed[0][1])


def test_per_step_means_over_ranks_from_one_vector() -> None:
    ranks = [DataAggregator(steps_per_interval=10) for _ in range(4)]
    for rank, agg in enumerate(ranks):
        for step in range(1, 11):
            agg.add(step, {"train/loss": float(rank + step), "custom/x": 10.0 * rank})
    reduction = _reduce(ranks, [True] * 4)
    assert not reduction.mismatch
    assert [step for step, _ in reduction.steps] == list(range(1, 11))
    for step, means in reduction.steps:
        assert math.isclose(means["train/loss"], step + 1.5, rel_tol=1e-6)
        assert math.isclose(means["custom/x"], 15.0, rel_tol=1e-6)


def test_vector_size_does_not_depend_on_the_number_of_metrics() -> None:
    one, many = DataAggregator(10), DataAggregator(10)
    one.add(1, {"train/loss": 1.0})
    many.add(1, {f"m{i}": 1.0 for i in range(20)})
    assert one.pack(True)[0].shape == many.pack(True)[0].shape


def test_only_ranks_that_hold_data_metrics_count() -> None:
    # 2 pipeline stages x 2: ranks 0 and 1 (first stage) output placeholders.
    topologies = [_topology(rank, 4, stages=2) for rank in range(4)]
    assert [t.holds_data_metrics for t in topologies] == [False, False, True, True]
    assert topologies[0].writer_rank == 2
    ranks = [DataAggregator(1) for _ in range(4)]
    for rank, agg in enumerate(ranks):
        agg.add(5, {"train/loss": 100.0 if rank < 2 else float(rank)})
    reduction = _reduce(ranks, [t.holds_data_metrics for t in topologies])
    assert reduction.steps == [(5, {"train/loss": 2.5})]


def test_different_tag_sets_are_detected_not_averaged() -> None:
    first, second = DataAggregator(2), DataAggregator(2)
    first.add(1, {"train/loss": 1.0, "custom/only_here": 5.0})
    second.add(1, {"train/loss": 3.0})
    reduction = _reduce([first, second], [True, True])
    assert reduction.mismatch
    assert reduction.steps == [(1, {"train/loss": 1.0, "custom/only_here": 5.0})]  # rank 0's own values


def test_tags_beyond_capacity_are_reported_as_local_values() -> None:
    agg = DataAggregator(1)
    agg.add(1, {f"m{i:02d}": float(i) for i in range(MAX_DATA_TAGS + 2)})
    reduction = _reduce([agg], [True])
    assert len(reduction.steps[0][1]) == MAX_DATA_TAGS
    assert reduction.local_only == [(1, {f"m{MAX_DATA_TAGS:02d}": 32.0, f"m{MAX_DATA_TAGS + 1:02d}": 33.0})]


def test_system_summary_names_the_straggler_and_the_slowest_ranks() -> None:
    rows = []
    for rank, step_time in enumerate([100.0, 105.0, 400.0, 98.0]):
        summary = SystemSummary()
        summary.add({"perf/step_time_ms": step_time, "system/host_rss_gb": 1.0 + rank})
        summary.add({"perf/step_time_ms": step_time, "system/host_rss_gb": 1.0 + rank})
        rows.append(summary.pack())
    values = SystemSummary.summarize(np.stack(rows), topk=2)
    assert values["ranks/step_time_ms_max"] == 400.0
    assert values["ranks/step_time_ms_argmax"] == 2.0
    assert values["ranks/step_time_ms_min"] == 98.0
    assert math.isclose(values["ranks/step_time_ms_mean"], 175.75)
    assert values["ranks/host_rss_gb_argmax"] == 3.0
    assert (values["ranks/slowest_1_rank"], values["ranks/slowest_2_rank"]) == (2.0, 1.0)
    assert "ranks/device_mem_peak_gb_max" not in values  # no rank reported it


def test_system_slots_summed_over_ranks_are_every_ranks_row() -> None:
    world = 3
    summed = np.zeros(world * 4, dtype=np.float32)
    for rank in range(world):
        summary = SystemSummary()
        summary.add({"perf/step_time_ms": 10.0 * (rank + 1)})  # memory absent: NaN in its own slot only
        summed += summary.pack_slots(rank, world)
    rows = summed.reshape(world, -1)
    assert rows[:, 0].tolist() == [10.0, 20.0, 30.0]
    assert np.isnan(rows[:, 1]).all()
    assert SystemSummary.summarize(rows, topk=0)["ranks/step_time_ms_argmax"] == 2.0


def _job_reduce(throughputs: list[JobThroughput]) -> dict[str, float]:
    total = np.sum([throughput.pack() for throughput in throughputs], axis=0, dtype=np.float32)
    return throughputs[0].unpack(total)


def test_job_throughput_sums_each_replicas_rate_over_the_interval() -> None:
    # 4 ranks, 2 pipeline stages: ranks 2 and 3 speak for the 2 replicas, ranks 0 and 1 send zeros.
    topologies = [_topology(rank, 4, stages=2) for rank in range(4)]
    throughputs = [JobThroughput(t.data_parallel_factor, t.speaks_for_a_replica) for t in topologies]
    own_rates = {0: [50.0, 50.0], 1: [50.0, 50.0], 2: [8.0, 2.0], 3: [4.0, 4.0]}  # the job's samples / own time
    for rank, throughput in enumerate(throughputs):
        for rate in own_rates[rank]:
            throughput.add({"perf/samples_per_s": rate, "perf/tokens_per_s": 100.0 * rate, "perf/step_time_ms": 1.0})
    values = _job_reduce(throughputs)
    # Rank 2 over the interval: 2 steps in 1/8 + 1/2 of a step's samples' time, 3.2; its replica reads half.
    assert set(values) == {"perf/job_samples_per_s", "perf/job_tokens_per_s"}
    assert math.isclose(values["perf/job_samples_per_s"], 3.2 / 2 + 4.0 / 2, rel_tol=1e-6)
    assert math.isclose(values["perf/job_tokens_per_s"], 100 * (3.2 / 2 + 4.0 / 2), rel_tol=1e-6)
    assert not _job_reduce(throughputs)  # packing cleared the interval


def test_job_throughput_needs_every_replica() -> None:
    throughputs = [JobThroughput(2, True), JobThroughput(2, True)]
    throughputs[0].add({"perf/samples_per_s": 4.0, "perf/tokens_per_s": 64.0})
    throughputs[1].add({"perf/samples_per_s": 2.0})  # no tokens/s from this replica: no job tokens/s
    throughputs[1].add({"perf/samples_per_s": float("nan")})  # not a rate: left out
    assert _job_reduce(throughputs) == {"perf/job_samples_per_s": 4.0 / 2 + 2.0 / 2}


def test_writer_rank_rule() -> None:
    assert _topology(0, 1).writer_rank == 0
    assert _topology(3, 8).writer_rank == 0
    assert _topology(0, 8, stages=4).writer_rank == 6
    assert _topology(0, 8).data_parallel_factor == 8
    assert _topology(0, 8, stages=2).data_parallel_factor == 4
    assert [_topology(rank, 8, stages=2).speaks_for_a_replica for rank in range(8)] == [False] * 4 + [True] * 4
    full_batch = [Topology(rank, 4, 1, "semi_auto_parallel", True, True) for rank in range(4)]
    assert [t.speaks_for_a_replica for t in full_batch] == [True, False, False, False]
    assert _topology(0, 1).speaks_for_a_replica


def _losses_reduced(losses_of: list[list[float | None]], holds: list[bool], capacity: int = 4):
    """Each rank's LossAggregator fed its losses of consecutive steps from 1, summed as the all-reduce sums."""
    world = len(losses_of)
    aggregators = [LossAggregator(capacity, rank, world, holds[rank]) for rank in range(world)]
    for aggregator, losses in zip(aggregators, losses_of, strict=True):
        for step, loss in enumerate(losses, start=1):
            aggregator.add(step, loss)
    total = np.sum([aggregator.pack() for aggregator in aggregators], axis=0, dtype=np.float32)
    assert total.size == (capacity + 1) * world
    return aggregators[0].unpack(total)


def test_the_highest_loss_of_each_step_and_its_rank() -> None:
    by_rank = _losses_reduced([[2.0, 2.5, 3.0], [2.25, 9.0, 3.0], [1.0, 2.0, 3.5]], [True] * 3)
    assert by_rank.highest == [
        (1, {"train/loss_max": 2.25, "train/loss_max_rank": 1.0}),
        (2, {"train/loss_max": 9.0, "train/loss_max_rank": 1.0}),
        (3, {"train/loss_max": 3.5, "train/loss_max_rank": 2.0}),
    ]
    np.testing.assert_allclose(by_rank.interval_means, [2.5, 14.25 / 3, 6.5 / 3], rtol=1e-6)


def test_a_nonfinite_loss_is_the_highest_and_its_rank_is_named() -> None:
    by_rank = _losses_reduced([[2.0, math.inf], [math.nan, 3.0], [5.0, 4.0]], [True] * 3)
    (_, first), (_, second) = by_rank.highest
    assert math.isnan(first["train/loss_max"]) and first["train/loss_max_rank"] == 1.0
    assert second == {"train/loss_max": math.inf, "train/loss_max_rank": 0.0}
    assert by_rank.interval_means.tolist() == [math.inf, math.inf, 4.5]  # saturates the rank's heatmap cell


def test_ranks_without_the_loss_are_not_compared() -> None:
    # Two pipeline stages: ranks 0 and 1 output a placeholder loss; a step without a loss is skipped.
    by_rank = _losses_reduced([[100.0, 100.0], [100.0, 100.0], [1.0, None], [2.0, 0.5]], [False, False, True, True])
    assert by_rank.highest == [
        (1, {"train/loss_max": 2.0, "train/loss_max_rank": 3.0}),
        (2, {"train/loss_max": 0.5, "train/loss_max_rank": 3.0}),
    ]
    assert np.isnan(by_rank.interval_means[:2]).all() and by_rank.interval_means[2:].tolist() == [1.0, 1.25]
    nobody = _losses_reduced([[1.0], [2.0]], [False, False])
    assert nobody.highest == [] and np.isnan(nobody.interval_means).all()
