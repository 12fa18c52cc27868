"""MetricRouter (pipeline/routing.py) on simulated ranks, without MindSpore (tests/fakes.py: ranks in
threads, a summing collective, recording writers); the last tests drive whole TensorBoardMonitors the
same way, with real event files read back by TensorBoard's reader. The real collectives are exercised
under msrun by tests/jobs/test_msrun_jobs.py."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import plugin_log, read_scalars
from fakes import (
    LOSS,
    LR,
    RSS,
    STEP_TIME,
    FakeCollectives,
    Group,
    Rank,
    RecordingWriter,
    dp_metrics,
    make_job,
    run_ranks,
    train,
)

from mindformers_tbplugin.pipeline.aggregation import MAX_DATA_TAGS
from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
from mindformers_tbplugin.pipeline.topology import Topology

SAMPLES, TOKENS = "perf/samples_per_s", "perf/tokens_per_s"
JOB_SAMPLES, JOB_TOKENS = "perf/job_samples_per_s", "perf/job_tokens_per_s"
MISMATCH = "ranks logged different data metrics"


# -- data, model and system metrics -----------------------------------------------------------------
def test_data_metrics_are_the_mean_over_data_parallel_ranks() -> None:
    ranks = make_job(2, aggregate_every=4, vs_samples=True, samples_per_step=8.0)
    published: list[tuple[int, dict[str, float]]] = []
    ranks[0].router.run.subscribe(lambda step, values: published.append((step, dict(values))))
    train(ranks, range(1, 9), dp_metrics)
    main = ranks[0].main
    assert ranks[1].main is None
    assert main.series(LOSS) == [(step, step + 1.5) for step in range(1, 9)]
    assert main.series(LOSS + "_vs_samples") == [(8 * step, step + 1.5) for step in range(1, 9)]
    assert not any(tag.startswith("local/") for tag in main.tags())
    # Listeners (alert rules) see the averaged loss, exactly as written.
    assert [(step, values[LOSS]) for step, values in published if LOSS in values] == main.series(LOSS)
    assert not ranks[0].router.stop_agreed and not ranks[1].router.stop_agreed


def test_the_highest_rank_loss_and_its_rank_are_written_at_every_logged_step() -> None:
    ranks = make_job(2, aggregate_every=4)
    train(ranks, range(1, 11), dp_metrics)  # rank 1's loss is rank 0's + 2; aggregations at 4, 8 and the end
    main = ranks[0].main
    assert main.series("train/loss_max") == [(step, step + 2.5) for step in range(1, 11)]
    assert main.series("train/loss_max_rank") == [(step, 1.0) for step in range(1, 11)]
    assert "train/loss_max" not in ranks[0].rank_run.tags()  # the job's, in the main run only


def test_averaged_data_metrics_are_written_at_the_aggregation() -> None:
    ranks = make_job(2, aggregate_every=4)
    written: dict[int, list[int]] = {}  # after each step of the writer rank: the loss steps written so far

    def after_step(rank: int, step: int) -> None:
        if rank == 0:
            written[step] = [loss_step for loss_step, _ in ranks[0].main.series(LOSS)]

    train(ranks, range(1, 9), dp_metrics, after_step=after_step)
    first, both = [1, 2, 3, 4], list(range(1, 9))
    assert written == {1: [], 2: [], 3: [], 4: first, 5: first, 6: first, 7: first, 8: both}


def test_model_metrics_are_written_once_by_the_writer_rank() -> None:
    ranks = make_job(2, aggregate_every=4)
    train(ranks, range(1, 9), dp_metrics)
    assert ranks[0].main.series(LR) == [(step, 0.001 * step) for step in range(1, 9)]
    for rank in ranks:  # rank runs hold system metrics only (rank_policy "writer")
        assert rank.rank_run.tags() == {STEP_TIME, RSS}


def test_system_metrics_per_rank_and_their_cross_rank_summary() -> None:
    ranks = make_job(2, aggregate_every=4)
    train(ranks, range(1, 9), dp_metrics)
    for rank in ranks:
        r = rank.topology.rank
        assert rank.rank_run.series(STEP_TIME) == [(step, 100.0 + 200.0 * r + step) for step in range(1, 9)]
        assert rank.rank_run.series(RSS) == [(step, 2.0 - 0.5 * r) for step in range(1, 9)]
    main = ranks[0].main
    # The main run: the writer rank's own values at every step ...
    assert main.series(STEP_TIME) == [(step, 100.0 + step) for step in range(1, 9)]
    # ... and per interval, the statistics over the ranks' interval means (rank 0: 102.5 then 106.5).
    assert main.series("ranks/step_time_ms_min") == [(4, 102.5), (8, 106.5)]
    assert main.series("ranks/step_time_ms_max") == [(4, 302.5), (8, 306.5)]
    assert main.series("ranks/step_time_ms_mean") == [(4, 202.5), (8, 206.5)]
    assert main.series("ranks/step_time_ms_argmax") == [(4, 1.0), (8, 1.0)]
    assert main.series("ranks/host_rss_gb_max") == [(4, 2.0), (8, 2.0)]
    assert main.series("ranks/host_rss_gb_argmax") == [(4, 0.0), (8, 0.0)]
    assert main.series("ranks/host_rss_gb_min") == [(4, 1.5), (8, 1.5)]
    # Per-rank runs show every rank: no slowest-ranks list.
    assert not any(tag.startswith("ranks/slowest_") for tag in main.tags())


def test_without_rank_runs_the_main_run_names_the_slowest_ranks() -> None:
    step_times = {0: 150.0, 1: 400.0, 2: 100.0}  # rank 1 is the slowest, then rank 0

    def metrics_of(rank: int, step: int) -> StepMetrics:
        return StepMetrics(step, data={LOSS: float(rank)}, system={STEP_TIME: step_times[rank]})

    ranks = make_job(3, aggregate_every=2, topk_ranks=2, rank_runs=False)
    train(ranks, range(1, 3), metrics_of)
    main = ranks[0].main
    assert main.series("ranks/slowest_1_rank") == [(2, 1.0)]
    assert main.series("ranks/slowest_1_step_time_ms") == [(2, 400.0)]
    assert main.series("ranks/slowest_2_rank") == [(2, 0.0)]
    assert main.series("ranks/slowest_2_step_time_ms") == [(2, 150.0)]
    assert "ranks/slowest_3_rank" not in main.tags()
    assert main.series("ranks/step_time_ms_argmax") == [(2, 1.0)]
    assert main.series(LOSS) == [(1, 1.0), (2, 1.0)]


def test_rank_policy_all_gives_each_rank_run_all_its_own_values() -> None:
    ranks = make_job(2, aggregate_every=4, rank_policy="all")
    train(ranks, range(1, 5), dp_metrics)
    for rank in ranks:
        r = rank.topology.rank
        assert rank.rank_run.series(LOSS) == [(step, step + 0.5 + 2.0 * r) for step in range(1, 5)]
        assert rank.rank_run.tags() == {LOSS, LR, STEP_TIME, RSS}
    assert ranks[0].main.series(LOSS) == [(step, step + 1.5) for step in range(1, 5)]


# -- the job's throughput ----------------------------------------------------------------------------
def throughput_metrics(rates: dict[int, list[float]]) -> Callable[[int, int], StepMetrics]:
    """Each rank's own perf/samples_per_s (the job's 8 samples per step over its own step time) cycles
    through ``rates[rank]``; tokens are 16 per sample."""

    def metrics_of(rank: int, step: int) -> StepMetrics:
        samples = rates[rank][(step - 1) % len(rates[rank])]
        system = {STEP_TIME: 8000.0 / samples, SAMPLES: samples, TOKENS: 16.0 * samples}
        return StepMetrics(step, data={LOSS: float(rank)}, system=system)

    return metrics_of


def test_job_throughput_is_the_sum_over_data_parallel_replicas_per_interval() -> None:
    # Rank 0 alternates 8 and 2 samples/s: 2 steps x 8 samples in 1 s + 4 s, so 3.2 samples/s over
    # the interval. Rank 1 runs at 4. Each rank's replica reads half of the job's 8 samples per step.
    ranks = make_job(2, aggregate_every=4)
    published: list[tuple[int, dict[str, float]]] = []
    ranks[0].router.run.subscribe(lambda step, values: published.append((step, dict(values))))
    train(ranks, range(1, 9), throughput_metrics({0: [8.0, 2.0], 1: [4.0]}))
    main = ranks[0].main
    expected = 3.2 / 2 + 4.0 / 2
    assert [step for step, _ in main.series(JOB_SAMPLES)] == [4, 8]  # at each aggregation
    for (_, samples), (_, tokens) in zip(main.series(JOB_SAMPLES), main.series(JOB_TOKENS), strict=True):
        assert math.isclose(samples, expected, rel_tol=1e-6)
        assert math.isclose(tokens, 16 * expected, rel_tol=1e-6)
    # perf/tokens_per_s keeps its meaning: the writing rank's own value, at every logged step.
    assert main.series(TOKENS) == [(step, 16.0 * (8.0 if step % 2 else 2.0)) for step in range(1, 9)]
    for rank in ranks:  # rank runs: each rank's own values, no job figure
        assert rank.rank_run.tags() == {STEP_TIME, SAMPLES, TOKENS}
    assert [values[JOB_TOKENS] for _, values in published if JOB_TOKENS in values] == [
        v for _, v in main.series(JOB_TOKENS)
    ]
    assert [rank.collectives.calls for rank in ranks] == [2, 2]  # the interval's one all-reduce carries it


def test_job_throughput_counts_each_replica_once_under_pipeline_parallelism() -> None:
    # 4 ranks, 2 pipeline stages: 2 replicas, each of a first-stage rank (0 or 1) and a last-stage rank
    # (2 or 3). The first stage's own rates must not be added to their replica's.
    ranks = make_job(4, stages=2, aggregate_every=2)
    assert [rank.topology.speaks_for_a_replica for rank in ranks] == [False, False, True, True]
    train(ranks, range(1, 5), throughput_metrics({0: [100.0], 1: [100.0], 2: [4.0], 3: [2.0]}))
    assert ranks[2].main.series(JOB_SAMPLES) == [(2, 3.0), (4, 3.0)]  # 4/2 + 2/2
    assert ranks[2].main.series(JOB_TOKENS) == [(2, 48.0), (4, 48.0)]


def test_job_throughput_when_every_rank_reads_the_full_batch_is_the_writing_ranks() -> None:
    # full_batch: every rank reads the job's whole batch, so the job is one replica, the writing rank's.
    ranks = make_job(2, aggregate_every=2, full_batch=True)
    assert [rank.topology.data_parallel_factor for rank in ranks] == [1, 1]
    assert [rank.topology.speaks_for_a_replica for rank in ranks] == [True, False]
    train(ranks, range(1, 3), throughput_metrics({0: [4.0], 1: [2.0]}))
    assert ranks[0].main.series(JOB_SAMPLES) == [(2, 4.0)]


def test_without_aggregation_no_job_throughput_is_written() -> None:
    ranks = make_job(2, aggregate_every=0)
    train(ranks, range(1, 5), throughput_metrics({0: [4.0], 1: [2.0]}))
    assert ranks[0].main.series(TOKENS) == [(step, 64.0) for step in range(1, 5)]  # the writing rank's own
    assert not {JOB_SAMPLES, JOB_TOKENS} & ranks[0].main.tags()


def test_a_single_process_writes_no_job_throughput() -> None:
    main = RecordingWriter()
    options = RouterOptions(10, "writer", 0, False, False, 8.0, 16)
    router = MetricRouter(Topology(0, 1, 1, "stand_alone", False, False), options, main, None, None)  # type: ignore[arg-type]
    for step in range(1, 21):
        router.log_step(throughput_metrics({0: [4.0]})(0, step))
    router.finish(clean=True)
    assert main.series(TOKENS) == [(step, 64.0) for step in range(1, 21)]  # it is the job's
    assert main.tags() == {LOSS, STEP_TIME, SAMPLES, TOKENS}


# -- one collective per interval ----------------------------------------------------------------------
def test_exactly_one_all_reduce_per_aggregation_interval_whatever_the_metrics() -> None:
    def metrics_of(rank: int, step: int) -> StepMetrics:
        data = {f"custom/m{i:02d}": float(rank * 100 + i) for i in range(20)}
        return StepMetrics(step, data={LOSS: float(rank), **data}, system={STEP_TIME: 10.0})

    ranks = make_job(2, aggregate_every=4)
    train(ranks, range(1, 11), metrics_of)  # intervals end at steps 4 and 8; finish() takes steps 9-10
    for rank in ranks:
        assert rank.collectives.calls == 3
        assert rank.router.aggregations == 3
        assert len(set(rank.collectives.sizes)) == 1  # one vector size for the whole run
    main = ranks[0].main
    assert main.series(LOSS) == [(step, 0.5) for step in range(1, 11)]
    assert main.series("custom/m07") == [(step, 57.0) for step in range(1, 11)]


# -- what cannot be averaged ------------------------------------------------------------------------
def test_ranks_logging_different_data_tags_are_detected_not_averaged() -> None:
    def metrics_of(rank: int, step: int) -> StepMetrics:
        data = {LOSS: step + 0.5 + 2.0 * rank}
        if rank == 0:
            data["custom/acc"] = 0.25 * step  # on rank 0 only
        return StepMetrics(step, data=data)

    ranks = make_job(2, aggregate_every=2)
    with plugin_log() as messages:
        train(ranks, range(1, 5), metrics_of)  # two intervals, both mismatched
    main = ranks[0].main
    assert main.series("local/train/loss") == [(step, step + 0.5) for step in range(1, 5)]  # rank 0's own
    assert main.series("local/custom/acc") == [(step, 0.25 * step) for step in range(1, 5)]
    assert LOSS not in main.tags() and "custom/acc" not in main.tags()
    warnings = [m for m in messages if MISMATCH in m]
    assert len(warnings) == 1, messages  # said once, not at every interval
    assert "rank 0's own values under local/" in warnings[0]


def test_matching_tags_raise_no_mismatch_warning() -> None:
    ranks = make_job(2, aggregate_every=2)
    with plugin_log() as messages:
        train(ranks, range(1, 5), dp_metrics)
    assert not [m for m in messages if MISMATCH in m]


def test_data_tags_beyond_capacity_are_the_writer_ranks_own_values_with_a_warning() -> None:
    def metrics_of(rank: int, step: int) -> StepMetrics:
        averaged = {f"custom/m{i:02d}": float(rank) for i in range(MAX_DATA_TAGS - 1)}
        overflow = {"zz/late_a": 10.0 + rank, "zz/late_b": 20.0 + rank}  # sorted after the first MAX_DATA_TAGS
        return StepMetrics(step, data={LOSS: step + 0.5 + 2.0 * rank, **averaged, **overflow})

    ranks = make_job(2, aggregate_every=2)
    with plugin_log() as messages:
        train(ranks, range(1, 5), metrics_of)
    main = ranks[0].main
    assert main.series(LOSS) == [(step, step + 1.5) for step in range(1, 5)]
    assert main.series(f"custom/m{MAX_DATA_TAGS - 2:02d}") == [(step, 0.5) for step in range(1, 5)]
    assert main.series("local/zz/late_a") == [(step, 10.0) for step in range(1, 5)]
    assert "zz/late_b" not in main.tags() and main.series("local/zz/late_b")[-1] == (4, 20.0)
    assert len([m for m in messages if "zz/late_a, zz/late_b are not averaged" in m]) == 1, messages


def test_an_earlier_pipeline_stage_contributes_nothing_to_data_means() -> None:
    # 4 ranks, 2 pipeline stages: ranks 0-1 (first stage) output a placeholder loss; rank 2 writes.
    def metrics_of(rank: int, step: int) -> StepMetrics:
        loss = 1000.0 if rank < 2 else step + 2.0 * (rank - 2)  # ranks 2, 3: step and step + 2
        return StepMetrics(step, data={LOSS: loss}, model={LR: 0.5}, system={STEP_TIME: 10.0 * (rank + 1)})

    ranks = make_job(4, stages=2, aggregate_every=2)
    assert [rank.topology.is_writer for rank in ranks] == [False, False, True, False]
    train(ranks, range(1, 5), metrics_of)
    main = ranks[2].main
    assert main.series(LOSS) == [(step, step + 1.0) for step in range(1, 5)]
    assert main.series(LR) == [(step, 0.5) for step in range(1, 5)]
    # System statistics still cover every rank, the first stage included.
    assert main.series("ranks/step_time_ms_min") == [(2, 10.0), (4, 10.0)]
    assert main.series("ranks/step_time_ms_max") == [(2, 40.0), (4, 40.0)]
    assert main.series("ranks/step_time_ms_argmax") == [(2, 3.0), (4, 3.0)]


def test_without_aggregation_the_writer_rank_writes_its_own_data_values_under_local() -> None:
    ranks = make_job(2, aggregate_every=0)
    train(ranks, range(1, 5), dp_metrics)
    main = ranks[0].main
    assert main.series("local/train/loss") == [(step, step + 0.5) for step in range(1, 5)]
    assert LOSS not in main.tags() and not any(tag.startswith("ranks/") for tag in main.tags())
    assert [rank.collectives.calls for rank in ranks] == [0, 0]


def test_after_a_failure_pending_values_are_written_as_local_without_a_collective() -> None:
    ranks = make_job(2, aggregate_every=4)

    def script(rank: Rank) -> Callable[[], None]:
        def run() -> None:
            for step in range(1, 7):
                rank.router.log_step(dp_metrics(rank.topology.rank, step))
            rank.router.finish(clean=False)  # other ranks may be gone: no collective

        return run

    run_ranks(ranks, [script(rank) for rank in ranks])
    main = ranks[0].main
    assert main.series(LOSS) == [(step, step + 1.5) for step in range(1, 5)]
    assert main.series("local/train/loss") == [(5, 5.5), (6, 6.5)]
    assert [rank.collectives.calls for rank in ranks] == [1, 1]


# -- job-wide stop ----------------------------------------------------------------------------------
def test_a_stop_request_on_one_rank_rides_in_the_aggregation_and_stops_every_rank() -> None:
    ranks = make_job(2, aggregate_every=4)
    agreed_after: dict[int, list[int]] = {0: [], 1: []}

    def before_step(rank: int, step: int) -> None:
        if rank == 1 and step == 2:  # e.g. an alert with action: stop, on a rank that does not write
            assert ranks[1].router.run.stop.request()

    def after_step(rank: int, step: int) -> None:
        if ranks[rank].router.stop_agreed:
            agreed_after[rank].append(step)

    train(ranks, range(1, 9), dp_metrics, before_step, after_step)
    # Both ranks learn it from the interval's one collective (step 4), none before.
    assert agreed_after == {0: [4, 5, 6, 7, 8], 1: [4, 5, 6, 7, 8]}
    assert [rank.collectives.calls for rank in ranks] == [2, 2]
    assert not ranks[1].router.run.stop.take_request()  # consumed by the aggregation that carried it


def test_a_stop_request_without_aggregation_is_refused() -> None:
    ranks = make_job(2, aggregate_every=0)  # nothing carries it to the other ranks
    assert not ranks[0].router.run.stop.request()
    train(ranks, range(1, 3), dp_metrics)
    assert not any(rank.router.stop_agreed for rank in ranks)


def test_the_stop_carrier_is_released_at_the_end() -> None:
    ranks = make_job(2, aggregate_every=2)
    assert ranks[0].router.run.stop.request()
    train(ranks, range(1, 3), dp_metrics)
    assert all(rank.router.stop_agreed for rank in ranks)
    assert not ranks[0].router.run.stop.request()  # its router finished: no carrier left


# -- wired by TensorBoardMonitor, with real event files -----------------------------------------------
def _monitor_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_rank_limit: int) -> Path:
    """Two TensorBoardMonitors, ranks 0 and 1 of one simulated job, each in its own thread, 8 steps
    with aggregate_every 4 (rank 1's loss is rank 0's + 2); returns the run folder."""
    from mindformers_tbplugin.callbacks import tensorboard_monitor
    from mindformers_tbplugin.framework.model_facts import ModelFacts
    from mindformers_tbplugin.framework.trainers import StepEnd, TrainStart
    from mindformers_tbplugin.session import monitor_session

    group, this_rank = Group(2), threading.local()
    monkeypatch.setattr(monitor_session, "Collectives", lambda: FakeCollectives(group, this_rank.value))
    options = {"log_hparams": False, "log_config": False, "log_graph": False, "log_eval": False}
    monitors = [
        tensorboard_monitor.TensorBoardMonitor(
            log_dir=str(tmp_path / "tb"),
            experiment="sim",
            aggregate_every=4,
            param_norm_every=0,
            log_memory=False,
            per_rank_limit=per_rank_limit,
            topk_ranks=2,
            resume=False,
            **options,
        )
        for _ in range(2)
    ]

    def script(rank: int) -> Callable[[], None]:
        def run() -> None:
            this_rank.value = rank
            topology = Topology(rank, 2, 1, "data_parallel", False, communicating=True)
            monitor = monitors[rank]
            start = TrainStart(
                "classic", ModelFacts(), topology, None, None, 1, None, None, None, None, {}, lambda: None
            )
            monitor.train_started(start)
            for step in range(1, 9):
                monitor.step_began(step)
                outputs = (step + 0.5 + 2.0 * rank, False, 1.0, 0.001 * step, 1.0)
                monitor.step_ended(StepEnd(step, None, lambda _args, _step, outputs=outputs: outputs))
            monitor.train_ended(None)

        return run

    with plugin_log() as messages:
        run_ranks(group, [script(0), script(1)])
    assert not [m for m in messages if "training continues" in m], messages  # the monitor swallows errors
    (run_dir,) = (tmp_path / "tb").iterdir()
    assert monitors[1].run_dir == run_dir  # rank 1 learnt the writer rank's folder name
    return run_dir


def test_monitor_writes_rank_runs_up_to_per_rank_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _monitor_job(tmp_path, monkeypatch, per_rank_limit=2)
    main = read_scalars(run_dir)
    assert main[LOSS] == [(step, step + 1.5) for step in range(1, 9)]
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["rank_0", "rank_1"]
    for rank in (0, 1):
        own = read_scalars(run_dir / f"rank_{rank}")
        assert [step for step, _ in own[STEP_TIME]] == list(range(1, 9))
        assert LOSS not in own
    assert [step for step, _ in main["ranks/step_time_ms_max"]] == [4, 8]
    assert not [tag for tag in main if tag.startswith("ranks/slowest_")]


def test_monitor_beyond_per_rank_limit_lists_the_slowest_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _monitor_job(tmp_path, monkeypatch, per_rank_limit=1)
    main = read_scalars(run_dir)
    assert main[LOSS] == [(step, step + 1.5) for step in range(1, 9)]
    assert not [p for p in run_dir.iterdir() if p.is_dir()]  # no rank runs
    for place in (1, 2):
        assert [step for step, _ in main[f"ranks/slowest_{place}_rank"]] == [4, 8]
    assert {rank for _, rank in main["ranks/slowest_1_rank"] + main["ranks/slowest_2_rank"]} == {0.0, 1.0}
