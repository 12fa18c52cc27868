"""MoE expert load (pipeline/expert_load.py, expert_records.py, expert_routing.py, the aggregator in
aggregation.py): the moe/* arithmetic against hand-computed values, the moe/load records, and the
routing on simulated ranks (tests/fakes.py's summing collective), incl. pipeline stages
where a layer lives on some ranks only. Real trainings: tests/jobs/test_mcore_models.py."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from fakes import Rank, make_job, train
from tensorboard.util import tensor_util

from mindformers_tbplugin.alerts.expert_culprits import ExpertCulprits
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.pipeline import expert_routing
from mindformers_tbplugin.pipeline.aggregation import ExpertLoadAggregator
from mindformers_tbplugin.pipeline.expert_load import AUX_LOSS, EXPERT_BIAS, LoadStatistics, RouterSet
from mindformers_tbplugin.pipeline.expert_records import (
    PLUGIN_NAME,
    TAG,
    ExpertLayout,
    LoadRecorder,
    reads_per_record,
)
from mindformers_tbplugin.pipeline.metrics import StepMetrics

ROUTERS = RouterSet(("layers.1", "layers.2", "mtp.layers.0"), 4, 2, (EXPERT_BIAS, EXPERT_BIAS, EXPERT_BIAS))
NAN = math.nan


def test_relative_loads_are_each_expert_over_its_layers_mean() -> None:
    statistics = LoadStatistics(ROUTERS)
    loads = np.array([[1.0, 1.0, 1.0, 1.0], [0.4, 0.2, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0]])
    relative = statistics.relative(loads)
    np.testing.assert_allclose(relative[0], [1, 1, 1, 1])
    np.testing.assert_allclose(relative[1], [2.0, 1.0, 1.0, 0.0])  # any scale: 0.8 in all, mean 0.2
    assert np.isnan(relative[2]).all()  # no load: a layer this rank does not hold


def test_moe_scalars_match_hand_computed_values() -> None:
    statistics = LoadStatistics(ROUTERS, dead_fraction=0.1)
    relative = statistics.relative(np.array([[0.25, 0.25, 0.25, 0.25], [0.5, 0.3, 0.18, 0.02], [0.1, 0.2, 0.3, 0.4]]))
    bias = np.array([[0.0, 0.0, 0.0, 0.0], [-0.003, 0.001, 0.002, 0.004], [0.01, 0.0, -0.01, 0.0]])
    values = statistics.scalars(relative, bias)
    assert values["moe/layers.1/max_violation"] == pytest.approx(0.0)
    assert values["moe/layers.2/max_violation"] == pytest.approx(0.5 / 0.25 - 1)  # MaxVio = max / mean - 1
    assert values["moe/layers.2/min_load"] == pytest.approx(0.02 / 0.25)
    assert values["moe/layers.2/dead_experts"] == 1.0  # 0.08 x the mean < 0.1
    assert values["moe/mtp.layers.0/max_violation"] == pytest.approx(0.4 / 0.25 - 1)
    assert values["moe/layers.2/bias_range"] == pytest.approx(0.007)
    assert values["moe/max_violation"] == pytest.approx(1.0)  # the worst layer's
    assert values["moe/dead_experts"] == 1.0


def test_layers_without_load_and_routers_without_bias_write_nothing() -> None:
    routers = RouterSet(("layers.0", "layers.1"), 3, 1, (AUX_LOSS, AUX_LOSS))
    statistics = LoadStatistics(routers)
    relative = statistics.relative(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    values = statistics.scalars(relative, None)
    assert set(values) == {
        "moe/layers.0/max_violation",
        "moe/layers.0/min_load",
        "moe/layers.0/dead_experts",
        "moe/max_violation",
        "moe/dead_experts",
    }
    assert statistics.scalars(statistics.relative(np.zeros((2, 3))), None) == {}


def test_a_collapse_names_its_layer_busy_and_idle_experts() -> None:
    statistics = LoadStatistics(ROUTERS, dead_fraction=0.1)
    relative = statistics.relative(np.array([[1, 1, 1, 1], [0.0, 0.01, 0.49, 0.5], [1, 1, 1, 1]], dtype=float))
    text = statistics.describe_collapse(relative, 1)
    assert text == "layers.2: experts 3, 2 took 2.00x, 1.96x the mean load; experts 0, 1 under 10% of it (0.00x, 0.04x)"
    even = statistics.relative(np.array([[1, 1, 1, 1], [0.5, 0.5, 0.0, 0.0], [1, 1, 1, 1]], dtype=float))
    assert statistics.describe_collapse(even, 1) == (
        "layers.2: experts 0, 1 took 2.00x, 2.00x the mean load; experts 2, 3 under 10% of it (0.00x, 0.00x)"
    )


def test_an_alert_on_moe_tags_names_the_layers_with_dead_experts() -> None:
    statistics = LoadStatistics(ROUTERS, dead_fraction=0.1)
    relative = statistics.relative(np.array([[1, 1, 1, 1], [0.0, 0.0, 0.5, 0.5], [1, 1, 1, 1]], dtype=float))
    culprits = ExpertCulprits()
    culprits.remember(7, relative, statistics)
    alert = Alert("expert_collapse", "moe/dead_experts", 7, 2.0, 1.0, "routing collapse", "warning", "warn")
    assert culprits.annotate(alert).message == (
        "routing collapse; layers.2: experts 2, 3 took 2.00x, 2.00x the mean load; "
        "experts 0, 1 under 10% of it (0.00x, 0.00x)"
    )
    other_step = Alert("expert_collapse", "moe/dead_experts", 8, 2.0, 1.0, "routing collapse", "warning", "warn")
    assert culprits.annotate(other_step) == other_step  # no read of that step: unchanged
    loss = Alert("spike", "train/loss", 7, 9.0, 1.0, "spiked", "warning", "warn")
    assert culprits.annotate(loss) == loss


# -- records ---------------------------------------------------------------------------------------
def test_records_stay_within_the_byte_budget() -> None:
    assert reads_per_record(3, 4, 2, steps_per_read=1, budget_bytes_per_step=1024) == 1  # tiny DeepSeek-V3
    # DeepSeek-V3: 59 MoE layers (58 + MTP) x 256 experts, load and bias: 60,516 bytes a record
    assert reads_per_record(59, 256, 2, steps_per_read=10, budget_bytes_per_step=1024) == 6
    assert reads_per_record(59, 256, 2, steps_per_read=10, budget_bytes_per_step=0) == 1


def test_the_layout_round_trips_through_the_plugin_content() -> None:
    layout = ExpertLayout(ROUTERS.groups, 4, 2, ROUTERS.kinds, ("load", "bias"), 10, 3, 0.1)
    assert ExpertLayout.from_content(layout.content()) == layout


def test_a_record_is_the_nan_aware_mean_of_its_reads() -> None:
    recorder = LoadRecorder(reads=2, with_bias=True)
    first = np.array([[1.0, 3.0], [NAN, NAN]])
    second = np.array([[3.0, 1.0], [2.0, 0.0]])
    assert recorder.add(first, np.array([[0.1, 0.2], [NAN, NAN]])) is None
    record = recorder.add(second, None)
    assert record.dtype == np.float16 and record.shape == (2, 2, 2)
    np.testing.assert_array_equal(record[0], [[2.0, 2.0], [2.0, 0.0]])  # a row missing once: the other read
    np.testing.assert_allclose(record[1, 0], [0.1, 0.2], rtol=1e-3)
    assert np.isnan(record[1, 1]).all()
    assert recorder.take() is None


def test_reads_per_interval_follow_the_schedules() -> None:
    options = expert_routing.router_options(
        ROUTERS, moe_every=3, log_every=1, aggregate_every=10, record_budget=0, dead_fraction=0.1
    )
    assert options["expert_reads_per_interval"] == 4  # multiples of 3 in 10 consecutive steps: at most 4
    options = expert_routing.router_options(ROUTERS, 10, 1, 10, 1024, 0.1)
    assert options["expert_reads_per_interval"] == 1
    assert options["expert_layout"].channels == ("load", "bias")
    assert expert_routing.router_options(None, 10, 1, 10, 1024, 0.1) == {}


# -- aggregation across ranks ------------------------------------------------------------------------
def test_the_aggregator_averages_each_layer_over_the_ranks_that_hold_it() -> None:
    aggregators = [ExpertLoadAggregator(2, 2, 3, with_bias=True) for _ in range(3)]
    own = [  # rank 2 holds only layer 1 (a later pipeline stage)
        np.array([[1.0, 1.0, 1.0], [0.5, 1.0, 1.5]]),
        np.array([[0.5, 1.0, 1.5], [1.5, 1.0, 0.5]]),
        np.array([[NAN, NAN, NAN], [1.0, 1.0, 1.0]]),
    ]
    bias = np.array([[0.1, 0.0, -0.1], [0.0, 0.0, 0.0]])
    for aggregator, relative in zip(aggregators, own, strict=True):
        aggregator.add(5, relative, bias)
    reduced = np.sum([aggregator.pack() for aggregator in aggregators], axis=0)
    assert reduced.size == aggregators[0].size == 2 * (2 * (2 * 3 + 1) + 1)
    ((step, mean, mean_bias),) = aggregators[0].unpack(reduced)
    assert step == 5
    np.testing.assert_allclose(mean[0], [0.75, 1.0, 1.25])  # ranks 0 and 1
    np.testing.assert_allclose(mean[1], [1.0, 1.0, 1.0])  # all three
    np.testing.assert_allclose(mean_bias[0], [0.1, 0.0, -0.1], rtol=1e-6)


def loads_of(rank: int, step: int) -> np.ndarray:
    """Rank 0 routes evenly; rank 1 sends layer 2's tokens to experts 2 and 3 only."""
    loads = np.full((3, 4), 0.25)
    if rank == 1:
        loads[1] = [0.0, 0.0, 0.5, 0.5]
    return loads


def moe_step(rank: int, step: int) -> StepMetrics:
    metrics = StepMetrics(step, data={"train/loss": 2.0 + rank}, model={"train/lr": 0.1})
    bias = np.full((3, 4), 0.001 * rank)
    metrics.expert_load = (loads_of(rank, step), bias)
    return metrics


def built(events: list) -> Callable[[int, Callable], None]:
    """RunWriter.add_built, run at once as the writer thread runs it: None means nothing to write."""

    def add_built(step: int, build: Callable) -> None:
        event = build(step, 1.0)
        if event is not None:
            events.append(event)

    return add_built


def record_events(ranks: list[Rank]) -> list:
    (writer,) = [rank.main for rank in ranks if rank.main is not None]
    events: list = []
    writer.add_built = built(events)  # type: ignore[attr-defined]
    return events


def test_two_ranks_write_the_mean_load_at_its_step_with_its_record() -> None:
    options = expert_routing.router_options(ROUTERS, 1, 1, 4, 0, 0.1)
    ranks = make_job(2, aggregate_every=4, **options)
    events = record_events(ranks)
    published: list[int] = []
    ranks[0].router.run.subscribe_expert_loads(lambda step, relative, statistics: published.append(step))
    train(ranks, range(1, 9), moe_step)
    main = ranks[0].main
    # layer 2: the mean of [1, 1, 1, 1] and [0, 0, 2, 2] = [0.5, 0.5, 1.5, 1.5]
    assert main.series("moe/layers.2/max_violation") == [(step, 0.5) for step in range(1, 9)]
    assert main.series("moe/layers.2/min_load") == [(step, 0.5) for step in range(1, 9)]
    assert main.series("moe/layers.1/max_violation") == [(step, 0.0) for step in range(1, 9)]
    assert main.series("moe/dead_experts") == [(step, 0.0) for step in range(1, 9)]
    # written with the loss of the same step, in one event
    assert all("train/loss" in values for step, values in main.calls if "moe/max_violation" in values)
    assert published == list(range(1, 9))
    assert len(events) == 8
    (value,) = events[0].summary.value
    assert value.tag == TAG and value.metadata.plugin_data.plugin_name == PLUGIN_NAME
    layout = ExpertLayout.from_content(value.metadata.plugin_data.content)
    assert layout.groups == ROUTERS.groups and layout.channels == ("load", "bias")
    record = tensor_util.make_ndarray(value.tensor)
    np.testing.assert_array_equal(record[0, 1], [0.5, 0.5, 1.5, 1.5])
    np.testing.assert_allclose(record[1, 0], [0.0005] * 4, rtol=1e-3)  # the ranks' mean bias
    assert events[1].summary.value[0].metadata.plugin_data.content == b""
    assert all(rank.collectives.calls == 2 for rank in ranks)  # the loads rode in the one all-reduce


def test_rank_policy_all_writes_each_ranks_own_loads_and_records() -> None:
    options = expert_routing.router_options(ROUTERS, 1, 1, 4, 0, 0.1)
    ranks = make_job(2, aggregate_every=4, rank_policy="all", **options)
    own_records: dict[int, list] = {0: [], 1: []}
    for rank in ranks:
        rank.rank_run.add_built = built(own_records[rank.topology.rank])
    record_events(ranks)
    train(ranks, range(1, 5), moe_step)
    assert ranks[1].rank_run.series("moe/layers.2/max_violation") == [(step, 1.0) for step in range(1, 5)]
    assert ranks[1].rank_run.series("moe/layers.2/dead_experts") == [(step, 2.0) for step in range(1, 5)]
    assert ranks[0].rank_run.series("moe/layers.2/max_violation") == [(step, 0.0) for step in range(1, 5)]
    own = tensor_util.make_ndarray(own_records[1][0].summary.value[0].tensor)
    np.testing.assert_array_equal(own[0, 1], [0.0, 0.0, 2.0, 2.0])


def test_one_process_writes_its_loads_at_once() -> None:
    options = expert_routing.router_options(ROUTERS, 1, 1, 4, 0, 0.1)
    (rank,) = make_job(1, aggregate_every=4, **options)
    events = record_events([rank])
    train([rank], range(1, 4), moe_step)
    assert rank.main.series("moe/layers.2/max_violation") == [(step, 0.0) for step in range(1, 4)]
    assert len(events) == 3


def test_without_aggregation_a_multi_rank_job_writes_local_loads() -> None:
    options = expert_routing.router_options(ROUTERS, 1, 1, 0, 0, 0.1)
    ranks = make_job(2, aggregate_every=0, **options)
    record_events(ranks)
    train(ranks, range(1, 3), moe_step)
    assert ranks[0].main.series("local/moe/layers.2/max_violation") == [(1, 0.0), (2, 0.0)]
    assert "moe/layers.2/max_violation" not in ranks[0].main.tags()


def test_after_a_failure_pending_loads_are_written_as_local() -> None:
    options = expert_routing.router_options(ROUTERS, 1, 1, 4, 0, 0.1)
    ranks = make_job(2, aggregate_every=4, **options)
    record_events(ranks)
    for rank in ranks:
        for step in (1, 2):
            rank.router.log_step(moe_step(rank.topology.rank, step))
    ranks[0].router.finish(clean=False)
    assert ranks[0].main.series("local/moe/layers.2/max_violation") == [(1, 0.0), (2, 0.0)]
    assert ranks[0].collectives.calls == 0


def test_a_read_without_bias_has_no_mean_bias() -> None:
    aggregators = [ExpertLoadAggregator(2, 1, 2, with_bias=True) for _ in range(2)]
    for aggregator in aggregators:
        aggregator.add(1, np.array([[1.0, 1.0]]), np.array([[0.5, -0.5]]))
        aggregator.add(2, np.array([[0.5, 1.5]]), None)  # the bias is read once per record
    reduced = np.sum([aggregator.pack() for aggregator in aggregators], axis=0)
    first, second = aggregators[0].unpack(reduced)
    np.testing.assert_allclose(first[2], [[0.5, -0.5]])
    assert second[0] == 2 and second[2] is None
    np.testing.assert_allclose(second[1], [[0.5, 1.5]])
