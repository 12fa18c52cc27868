"""Per-rank records for the ``ranks`` plugin (pipeline/rank_records.py and their routing): the byte-budget
stride, the max-over-intervals recorder, the layout every rank's node reaches the writer with (the
layout's own rules: test_rank_layout.py), and the records the writing rank's router queues on
simulated ranks (tests/fakes.py's summing collective), decoded by TensorBoard's own ``tensor_util``;
then whole TensorBoardMonitors writing real event files read back by TensorBoard's EventAccumulator.
A real msrun job: tests/jobs/test_msrun_jobs.py."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import plugin_log, read_scalars
from fakes import FakeCollectives, Group, Rank, dp_metrics, make_job, run_ranks, train
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.rank_records import (
    CHANNELS,
    PLUGIN_NAME,
    TAG,
    RankLayout,
    RankRecorder,
    intervals_per_record,
)
from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.session import run_folder
from mindformers_tbplugin.tfevents.reader import EventFileReader, scan_file

NAN = math.nan


def layout_for(world_size: int, intervals: int, steps_per_interval: int = 4) -> RankLayout:
    return RankLayout(
        world_size=world_size,
        channels=CHANNELS,
        steps_per_interval=steps_per_interval,
        intervals_per_record=intervals,
        nodes=(0,) * world_size,
        node_names=("node 0",),
        worker_log=None,
    )


# -- the stride and the recorder ----------------------------------------------------------------------
def test_small_worlds_get_a_record_every_interval_large_ones_one_per_several() -> None:
    assert intervals_per_record(2, 10, 1024) == 1
    assert intervals_per_record(1000, 10, 1024) == 1  # 10,100 bytes (5 channels) in a 10,240-byte interval
    assert intervals_per_record(1024, 10, 1024) == 2  # 10,340 bytes
    assert intervals_per_record(8192, 10, 1024) == 9  # 82,020 bytes: ceil(82,020 / 10,240)
    assert intervals_per_record(8192, 1, 1024) == 81
    assert intervals_per_record(8192, 10, 0) == 1  # budget 0: every interval
    assert intervals_per_record(8192, 0, 1024) == 81  # no interval length: counted as one step


def test_the_recorder_keeps_the_maximum_of_its_intervals_ignoring_missing_values() -> None:
    recorder = RankRecorder(3)
    assert recorder.add(np.array([[1.0, NAN], [5.0, NAN]], dtype=np.float32)) is None
    assert recorder.add(np.array([[2.0, 7.0], [NAN, NAN]], dtype=np.float32)) is None
    record = recorder.add(np.array([[0.5, 6.0], [4.0, NAN]], dtype=np.float32))
    assert record.dtype == np.float16
    np.testing.assert_array_equal(record, np.array([[2.0, 7.0], [5.0, NAN]], dtype=np.float16))
    assert recorder.take() is None  # nothing pending after a record
    recorder.add(np.array([[9.0, 1.0], [1.0, 1.0]], dtype=np.float32))
    np.testing.assert_array_equal(recorder.take(), np.array([[9.0, 1.0], [1.0, 1.0]], dtype=np.float16))


# -- the layout ------------------------------------------------------------------------------------------
def test_every_rank_tells_the_writer_its_node_in_the_run_folder_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    group, hosts = Group(3), [None] * 3
    monkeypatch.setenv(run_folder.NODE_RANK_ENV, "7")
    monkeypatch.setenv(run_folder.WORKER_LOGS_ENV, "/out/msrun_log")

    def script(rank: int) -> Callable[[], None]:
        def run() -> None:
            topology = Topology(rank, 3, 1, "data_parallel", False, communicating=True)
            values, hosts[rank] = run_folder._exchange(FakeCollectives(group, rank), topology, [70_000 + rank, 3])
            assert values == [70_000, 3]  # the writer's values, exact beyond float32's 2**24 too

        return run

    run_ranks(group, [script(rank) for rank in range(3)])
    here = run_folder.RankHost.this_process()
    assert hosts[0] == [here] * 3 and here.node_rank == 7
    writer = Topology(0, 3, 1, "data_parallel", False, communicating=True)
    layout = run_folder.rank_layout_of(hosts[0], writer, 10, 1024)
    assert layout.nodes == (7, 7, 7) and layout.node_names == (*(f"node {i}" for i in range(7)), here.host)
    assert layout.worker_log == "/out/msrun_log/{node}/worker_{rank}.log"
    assert run_folder.rank_layout_of(hosts[0], writer, 0, 1024) is None  # no aggregation, no records
    assert run_folder.rank_layout_of(hosts[1], Topology(1, 3, 1, "data_parallel", False, True), 10, 1024) is None


# -- the router on simulated ranks ---------------------------------------------------------------------
def record_events(ranks: list[Rank]) -> list:
    """The events the writing rank's router queues with ``add_built``, built as the writer thread does."""
    (writer,) = [rank.main for rank in ranks if rank.main is not None]
    events: list = []
    writer.add_built = lambda step, build: events.append(event_pb2.Event.FromString(build(step, 1.0)))  # type: ignore[attr-defined]
    return events


def matrix(event) -> np.ndarray:
    (value,) = event.summary.value
    assert value.tag == TAG and value.metadata.plugin_data.plugin_name == PLUGIN_NAME
    return tensor_util.make_ndarray(value.tensor)


def content(event) -> bytes:
    return event.summary.value[0].metadata.plugin_data.content


def test_the_writer_records_every_ranks_interval_means_at_each_aggregation() -> None:
    layout = layout_for(2, intervals=1)
    ranks = make_job(2, aggregate_every=4, rank_layout=layout)
    events = record_events(ranks)
    train(ranks, range(1, 11), dp_metrics)  # aggregations at 4 and 8, and at the end at 10
    assert [event.step for event in events] == [4, 8, 10]
    assert RankLayout.from_content(content(events[0])) == layout
    assert [content(event) for event in events[1:]] == [b"", b""]
    first = matrix(events[0])
    assert first.dtype == np.float16 and first.shape == (2, len(CHANNELS))
    # dp_metrics: step time 100 + 200 * rank + step (mean over 1-4: + 2.5), RSS 2 - 0.5 * rank, no device memory.
    # The last channel: each rank's mean loss over the interval (dp_metrics: step + 0.5 + 2 x rank).
    expected = np.array([[102.5, 2.0, NAN, NAN, 3.0], [302.5, 1.5, NAN, NAN, 5.0]], dtype=np.float16)
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(matrix(events[2])[:, 0], np.array([109.5, 309.5], dtype=np.float16))


def test_one_record_per_several_intervals_holds_their_maximum_and_the_rest_is_written_at_the_end() -> None:
    ranks = make_job(2, aggregate_every=4, rank_layout=layout_for(2, intervals=2))
    events = record_events(ranks)
    train(ranks, range(1, 13), dp_metrics)  # aggregations at 4, 8, 12
    assert [event.step for event in events] == [8, 12]  # 4 and 8 in one; 12 alone, at the end
    np.testing.assert_array_equal(matrix(events[0])[:, 0], np.array([106.5, 306.5], dtype=np.float16))
    np.testing.assert_array_equal(matrix(events[1])[:, 0], np.array([110.5, 310.5], dtype=np.float16))
    assert content(events[0]) and content(events[1]) == b""


def test_after_a_failure_the_intervals_already_gathered_are_still_written() -> None:
    ranks = make_job(2, aggregate_every=4, rank_layout=layout_for(2, intervals=2))
    events = record_events(ranks)

    def script(rank: Rank) -> Callable[[], None]:
        def run() -> None:
            for step in range(1, 7):  # aggregation at 4; steps 5 and 6 are never gathered
                rank.router.log_step(dp_metrics(rank.topology.rank, step))
            rank.router.finish(clean=False)

        return run

    run_ranks(ranks, [script(rank) for rank in ranks])
    assert [event.step for event in events] == [4]
    assert RankLayout.from_content(content(events[0])).world_size == 2
    assert [rank.collectives.calls for rank in ranks] == [1, 1]  # no collective after the failure


def test_records_ride_in_the_one_all_reduce_per_interval() -> None:
    calls = []
    for layout in (None, layout_for(2, intervals=1)):
        ranks = make_job(2, aggregate_every=4, rank_layout=layout)
        events = record_events(ranks)
        train(ranks, range(1, 13), dp_metrics)
        calls.append(([rank.collectives.sizes for rank in ranks], ranks[0].main.calls, len(events)))
    assert calls[0][0] == calls[1][0] and [len(sizes) for sizes in calls[0][0]] == [3, 3]  # same all-reduces
    assert calls[0][1] == calls[1][1]  # the same scalars
    assert (calls[0][2], calls[1][2]) == (0, 3)


def test_a_single_process_router_writes_no_record() -> None:
    events: list = []
    writer = type("Writer", (), {"add_scalars": lambda *a, **k: None, "add_built": lambda *a: events.append(a)})()
    topology = Topology(0, 1, 1, "stand_alone", False, communicating=False)
    options = RouterOptions(4, "writer", 0, False, False, None, None, rank_layout=layout_for(1, 1))
    router = MetricRouter(topology, options, writer, None, None)  # type: ignore[arg-type]
    for step in range(1, 9):
        router.log_step(StepMetrics(step, data={"train/loss": 1.0}, system={"perf/step_time_ms": 5.0}))
    router.finish(clean=True)
    assert events == []


# -- whole monitors, real event files ---------------------------------------------------------------------
def monitor_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world_size: int, **options: object) -> Path:
    """``world_size`` TensorBoardMonitors of one simulated job (each in its own thread), 10 steps with
    aggregate_every 4 exactly (aggregate_seconds 0); returns the run folder."""
    from mindformers_tbplugin.callbacks import tensorboard_monitor
    from mindformers_tbplugin.framework.model_facts import ModelFacts
    from mindformers_tbplugin.framework.trainers import StepEnd, TrainStart
    from mindformers_tbplugin.session import monitor_session

    group, this_rank = Group(world_size), threading.local()
    monkeypatch.setattr(monitor_session, "Collectives", lambda: FakeCollectives(group, this_rank.value))
    quiet = {"log_hparams": False, "log_config": False, "log_graph": False, "log_eval": False, "param_norm_every": 0}
    monitors = [
        tensorboard_monitor.TensorBoardMonitor(
            log_dir=str(tmp_path / "tb"), aggregate_every=4, aggregate_seconds=0, resume=False, **quiet, **options
        )
        for _ in range(world_size)
    ]

    def script(rank: int) -> Callable[[], None]:
        def run() -> None:
            this_rank.value = rank
            topology = Topology(rank, world_size, 1, "data_parallel", False, communicating=world_size > 1)
            start = TrainStart(
                "classic", ModelFacts(), topology, None, None, 1, None, None, None, None, {}, lambda: None
            )
            monitors[rank].train_started(start)
            for step in range(1, 11):
                monitors[rank].step_began(step)
                outputs = (step + 0.5, False, 1.0, 0.001 * step, 1.0)
                monitors[rank].step_ended(StepEnd(step, None, lambda _args, _step, outputs=outputs: outputs))
            monitors[rank].train_ended(None)

        return run

    with plugin_log() as messages:
        run_ranks(group, [script(rank) for rank in range(world_size)])
    assert not [m for m in messages if "training continues" in m], messages
    (run_dir,) = (tmp_path / "tb").iterdir()
    return run_dir


def read_records(run_dir: Path) -> tuple[list[tuple[int, np.ndarray]], dict[str, bytes]]:
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    metadata = {tag: accumulator.SummaryMetadata(tag).plugin_data for tag in accumulator.Tags()[TENSORS]}
    contents = {tag: data.content for tag, data in metadata.items() if data.plugin_name == PLUGIN_NAME}
    records = [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(TAG)] if contents else []
    return records, contents


def test_a_monitor_job_writes_records_read_back_by_tensorboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(run_folder.NODE_RANK_ENV, raising=False)
    monkeypatch.delenv(run_folder.WORKER_LOGS_ENV, raising=False)
    run_dir = monitor_job(tmp_path / "on", monkeypatch, 2)
    records, contents = read_records(run_dir)
    assert [step for step, _ in records] == [4, 8, 10]
    assert all(record.shape == (2, len(CHANNELS)) and not np.isnan(record[:, 0]).any() for _, record in records)
    layout = RankLayout.from_content(contents[TAG])
    assert (layout.world_size, layout.nodes, layout.worker_log) == (2, (0, 0), None)  # one host, no launcher
    plain = monitor_job(tmp_path / "off", monkeypatch, 2, rank_records=False)
    assert read_records(plain) == ([], {})
    assert set(read_scalars(plain)) == set(read_scalars(run_dir))
    # mftb watch's and mftb doctor's reader skip the records: the same scalars, an intact file.
    (events_file,) = run_dir.glob("events.out.tfevents.*")
    assert {tag for tag, *_ in EventFileReader(events_file).read()} == set(read_scalars(run_dir))
    assert scan_file(events_file).problem is None


def test_a_single_process_training_writes_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = monitor_job(tmp_path, monkeypatch, 1)
    assert read_records(run_dir) == ([], {})
    assert "train/loss" in read_scalars(run_dir)


def test_an_interval_longer_than_float16_holds_is_kept_as_its_largest_value() -> None:
    from mindformers_tbplugin.pipeline.rank_records import FLOAT16_MAX, RankRecorder

    gathered = np.array([[120_000.0, 1.0, np.nan, np.nan], [900.0, 1.0, np.nan, np.nan]], dtype=np.float32)
    record = RankRecorder(1).add(gathered)
    assert record[0, 0] == FLOAT16_MAX and np.isfinite(record[0, 0])
    assert np.isnan(record[0, 2]) and record[1, 0] == np.float16(900.0)
