"""Where a read of the MoE routers goes (pipeline/expert_routing.py): the RouterOptions' MoE fields a
training gets (record layout, reads per aggregation interval), the masking of the bias of routers
without one, the records handed to the writer thread, and the routing on simulated ranks
(tests/fakes.py's summing collective): one process at once, several averaged in the one all-reduce,
``local/`` without aggregation or after a failure, each rank's own with ``rank_policy: all``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
from fakes import MOE_ROUTERS as ROUTERS
from fakes import Rank, RecordingWriter, make_job, train
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from mindformers_tbplugin.pipeline import expert_routing
from mindformers_tbplugin.pipeline.expert_load import AUX_LOSS, EXPERT_BIAS, RouterSet
from mindformers_tbplugin.pipeline.expert_records import PLUGIN_NAME, TAG, ExpertLayout, reads_per_record
from mindformers_tbplugin.pipeline.expert_routing import ExpertLoadRouting
from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.run import Run
from mindformers_tbplugin.tfevents.writer import RunWriter


def read_scalars(run_dir: Path, step: int) -> dict[str, float]:
    """The scalars written at ``step`` in ``run_dir``, read back by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: event.value
        for tag in accumulator.Tags()["scalars"]
        for event in accumulator.Scalars(tag)
        if event.step == step
    }


# -- a training's options --------------------------------------------------------------------------------
def test_reads_per_interval_follow_the_schedules() -> None:
    options = expert_routing.router_options(
        ROUTERS, moe_every=3, log_every=1, aggregate_every=10, record_budget=0, dead_fraction=0.1
    )
    assert options["expert_reads_per_interval"] == 4  # multiples of 3 in 10 consecutive steps: at most 4
    options = expert_routing.router_options(ROUTERS, 10, 1, 10, 1024, 0.1)
    assert options["expert_reads_per_interval"] == 1
    assert options["expert_layout"].channels == ("load", "bias")
    assert expert_routing.router_options(None, 10, 1, 10, 1024, 0.1) == {}


def test_logged_steps_bound_the_reads_an_interval_holds() -> None:
    # moe_every 1 but only every 5th step logged: 2 reads in an interval of 10 steps, not 10.
    options = expert_routing.router_options(
        ROUTERS, moe_every=1, log_every=5, aggregate_every=10, record_budget=0, dead_fraction=0.1
    )
    assert options["expert_reads_per_interval"] == 2
    # Without aggregation (aggregate_every 0) the aggregator still holds one read.
    assert expert_routing.router_options(ROUTERS, 1, 1, 0, 0, 0.1)["expert_reads_per_interval"] == 1


def test_the_layout_describes_the_routers_and_the_schedule() -> None:
    options = expert_routing.router_options(
        ROUTERS, moe_every=10, log_every=1, aggregate_every=10, record_budget=1024, dead_fraction=0.05
    )
    assert options["expert_layout"] == ExpertLayout(
        groups=("layers.1", "layers.2", "mtp.layers.0"),
        experts=4,
        top_k=2,
        routers=(EXPERT_BIAS, EXPERT_BIAS, EXPERT_BIAS),
        channels=("load", "bias"),
        steps_per_read=10,
        reads_per_record=1,  # 3 x 4 x 2 x 2 + 100 = 148 bytes, within 10 steps x 1024
        dead_fraction=0.05,
    )
    assert options["routers"] is ROUTERS and options["dead_expert_fraction"] == 0.05


def test_routers_without_expert_bias_record_the_load_channel_only() -> None:
    aux = RouterSet(("layers.0", "layers.1"), 4, 2, (AUX_LOSS, AUX_LOSS))
    layout = expert_routing.router_options(aux, 1, 1, 4, 1024, 0.1)["expert_layout"]
    assert layout.channels == ("load",)


def test_a_deepseek_v3_size_record_covers_fewer_reads_without_the_bias_channel() -> None:
    groups = (*(f"layers.{index}" for index in range(3, 61)), "mtp.layers.0")  # 59 MoE layers
    with_bias = RouterSet(groups, 256, 8, (EXPERT_BIAS,) * 59)
    without = RouterSet(groups, 256, 8, (AUX_LOSS,) * 59)
    assert expert_routing.record_reads(with_bias, 10, 1024) == reads_per_record(59, 256, 2, 10, 1024) == 6
    # 59 x 256 x 2 bytes + 100 = 30,308 bytes over 10 steps x 1024: ceil(2.96) reads a record.
    assert expert_routing.record_reads(without, 10, 1024) == 3


# -- one read, on the writing rank ------------------------------------------------------------------------
MIXED = RouterSet(("layers.1", "layers.2"), 2, 1, (EXPERT_BIAS, AUX_LOSS))


def built(events: list) -> Callable[[int, Callable], None]:
    """RunWriter.add_built, run at once as the writer thread runs it (None means nothing to write),
    the bytes parsed back into an Event."""

    def add_built(step: int, build: Callable) -> None:
        event = build(step, 1.0)
        if event is not None:
            events.append(event_pb2.Event.FromString(event))

    return add_built


def writer_of(events: list) -> RecordingWriter:
    """A recording writer whose ``add_built`` builds at once, as the writer thread would."""
    writer = RecordingWriter()
    writer.add_built = built(events)  # type: ignore[attr-defined]
    return writer


def layout_of(routers: RouterSet, reads: int) -> ExpertLayout:
    channels = ("load", "bias") if routers.has_bias else ("load",)
    return ExpertLayout(routers.groups, routers.experts, routers.top_k, routers.kinds, channels, 1, reads, 0.1)


def test_the_bias_of_a_router_balanced_by_its_loss_alone_is_not_recorded() -> None:
    routing = ExpertLoadRouting(MIXED, 0.1, layout_of(MIXED, 1), reads_per_interval=1, aggregating=False)
    events: list = []
    writer = writer_of(events)
    relative = np.array([[0.5, 1.5], [1.0, 1.0]])
    bias = np.array([[0.25, -0.25], [0.5, 0.5]])  # the second row is whatever the aux-loss router holds
    routing.write(3, relative, bias, writer, raw=False)
    ((step, values),) = writer.calls
    assert step == 3 and values["moe/layers.1/bias_range"] == 0.5
    assert "moe/layers.2/bias_range" not in values
    (event,) = events
    assert event.step == 3
    record = tensor_util.make_ndarray(event.summary.value[0].tensor)
    np.testing.assert_array_equal(record[1, 0], [0.25, -0.25])
    assert np.isnan(record[1, 1]).all()  # masked: no expert bias in that layer


def test_a_read_is_scored_on_the_writer_thread_and_reaches_the_listeners_on_the_training_thread(
    tmp_path: Path,
) -> None:
    """A real RunWriter: the scoring runs on its thread; the listeners get the read, loads first, when
    the training thread delivers (here: when the run settles, as at the end of training), at its step."""
    run = Run()
    heard: list[tuple] = []
    run.subscribe_expert_loads(lambda step, relative, statistics: heard.append(("loads", step, relative.tolist())))
    run.subscribe(lambda step, values: heard.append(("values", step, values, threading.current_thread().name)))
    routing = ExpertLoadRouting(MIXED, 0.1, layout_of(MIXED, 1), 1, aggregating=False, publish_to=run)
    scored_on: list[str] = []
    scalars = routing.statistics.scalars
    routing.statistics.scalars = lambda *args: scored_on.append(threading.current_thread().name) or scalars(*args)
    writer = RunWriter(tmp_path / "run", flush_secs=60.0)
    run.on_settle(lambda: (writer.flush(), routing.deliver()))
    raw = np.array([[1.0, 3.0], [2.0, 2.0]], dtype=np.float32)  # as read: relative [0.5, 1.5], [1, 1]
    routing.write(5, raw, None, writer, raw=True)
    run.settle()
    writer.close()
    assert scored_on == [f"mftb-writer:{writer.run_dir.name}"]
    assert heard == [
        ("loads", 5, [[0.5, 1.5], [1.0, 1.0]]),
        ("values", 5, read_scalars(writer.run_dir, 5), threading.current_thread().name),
    ]
    assert read_scalars(writer.run_dir, 5)["moe/max_violation"] == 0.5  # 1.5 / 1 - 1


def test_a_rank_that_writes_no_run_scores_nothing() -> None:
    run = Run()
    run.subscribe(lambda step, values: None)
    routing = ExpertLoadRouting(MIXED, 0.1, layout_of(MIXED, 1), 1, aggregating=False, publish_to=run)
    routing.write(4, np.array([[0.5, 1.5], [1.0, 1.0]]), None, None, raw=False)
    assert not routing.ready


def test_the_end_of_training_writes_the_reads_of_a_record_not_yet_due_with_the_layout() -> None:
    routing = ExpertLoadRouting(MIXED, 0.1, layout_of(MIXED, 3), 1, aggregating=False)
    events: list = []
    writer = writer_of(events)
    routing.write(1, np.array([[0.5, 1.5], [1.0, 1.0]]), None, writer, raw=False)
    routing.write(2, np.array([[1.5, 0.5], [1.0, 1.0]]), None, writer, raw=False)
    assert events == []  # a record covers 3 reads
    routing.finish(writer, None)  # no step logged: nothing to write at
    assert events == []
    routing.finish(writer, 2)
    (event,) = events
    (value,) = event.summary.value
    assert event.step == 2 and value.tag == TAG and value.metadata.plugin_data.plugin_name == PLUGIN_NAME
    assert ExpertLayout.from_content(value.metadata.plugin_data.content) == layout_of(MIXED, 3)  # the first record
    np.testing.assert_array_equal(tensor_util.make_ndarray(value.tensor)[0], [[1.0, 1.0], [1.0, 1.0]])


def test_no_layout_no_record() -> None:
    """A rank that writes no moe dashboard (no layout) writes the scalars and queues no record."""
    routing = ExpertLoadRouting(MIXED, 0.1, None, 1, aggregating=False)
    events: list = []
    writer = writer_of(events)
    routing.write(1, np.array([[0.5, 1.5], [1.0, 1.0]]), None, writer, raw=False)
    routing.finish(writer, 1)
    assert events == [] and routing.aggregator is None
    assert [step for step, _ in writer.calls] == [1]


# -- on simulated ranks ---------------------------------------------------------------------------------
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
    # scored on the writer thread: in an event of their own at the step of the loss they were read with
    loss_steps = [step for step, values in main.calls if "train/loss" in values]
    assert [step for step, values in main.calls if "moe/max_violation" in values] == loss_steps
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


def test_a_stretched_interval_holds_a_read_per_step_and_writes_them_all() -> None:
    # Simulated steps are fast: after the first interval (4 reads) the ranks agree on the longest one.
    options = expert_routing.router_options(ROUTERS, 1, 1, 4, 0, 0.1)
    ranks = make_job(2, aggregate_every=4, aggregate_seconds=3600.0, **options)
    events = record_events(ranks)
    train(ranks, range(1, 31), moe_step)
    assert ranks[0].main.series("moe/layers.2/max_violation") == [(step, 0.5) for step in range(1, 31)]
    assert len(events) == 30 and all(rank.collectives.calls == 2 for rank in ranks)
    assert ranks[0].router._experts.aggregator.dropped == 0  # room for the 26 reads of the stretched interval


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
