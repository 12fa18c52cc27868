"""TensorBoardMonitor's ``baseline`` in a real tiny training: the baseline sub-run, the ``compare/*``
values against errors recomputed from both runs as TensorBoard reads them, the HParams summary and
``baseline_divergence`` naming the first divergent step.

The baseline is the shared tiny training's run folder (``tiny_run``, the same config) rewritten with
its ``train/loss`` shifted by 0.3 from step 17 on and its ``train/grad_norm`` 1.2 times as large from
step 9 on: a real run folder, rewritten so that the run diverges from its baseline at steps the test
knows."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
from conftest import TrainingRun, plugin_log, read_scalars, train, write_tiny_config

from mindformers_tbplugin.config.checker import check_file
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.registration.catalog import our_callbacks
from mindformers_tbplugin.schema import ConfigError
from mindformers_tbplugin.session import baseline as baseline_module
from mindformers_tbplugin.session.baseline import Baseline
from mindformers_tbplugin.session.tensorboard_options import TensorBoardOptions
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event

SHIFT, SHIFT_FROM = 0.3, 17
SCALE, SCALE_FROM = 1.2, 9
# The comparison runs on float64 values; event files hold float32: the recomputation from what
# TensorBoard reads differs by float32 rounding only.
FLOAT32 = {"rel": 1e-5, "abs": 1e-6}


def _rewrite_shifted(source: Path, target: Path) -> dict[str, dict[int, float]]:
    """``source``'s scalars, ``train/loss`` shifted from SHIFT_FROM, ``train/grad_norm`` scaled from
    SCALE_FROM, as a run folder."""
    scalars = {tag: dict(points) for tag, points in read_scalars(source).items()}
    loss, grad_norm = scalars[metrics.TRAIN_LOSS], scalars[metrics.TRAIN_GRAD_NORM]
    for step in loss:
        if step >= SHIFT_FROM:
            loss[step] += SHIFT
    for step in grad_norm:
        if step >= SCALE_FROM:
            grad_norm[step] *= SCALE
    events = EventFile(target)
    for step in sorted({step for series in scalars.values() for step in series}):
        values = {tag: series[step] for tag, series in scalars.items() if step in series}
        events.write(encode_scalars_event(step, 1.0 + step, values))
    events.close()
    return {tag: dict(points) for tag, points in read_scalars(target).items()}  # as float32, as read back


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path, tiny_run: TrainingRun) -> tuple:
    folder = tmp_path_factory.mktemp("baseline_run")
    baseline = _rewrite_shifted(tiny_run.run_dir, folder / "shifted_baseline")
    callbacks = [
        {"type": "MFLossMonitor"},
        {
            "type": "TensorBoardMonitor",
            "log_dir": str(folder / "tb"),
            "experiment": "compared",
            "baseline": "shifted_baseline",  # relative: from the training's working directory
        },
        {
            "type": "AlertMonitor",
            "rules": [{"rule": "baseline_divergence", "window": 4, "min_points": 4}],
            "sinks": ["log", {"jsonl": str(folder / "alerts.jsonl")}],
        },
    ]
    config = write_tiny_config(folder, tiny_data, callbacks, num_samples=64)
    run = train(config, folder)
    assert run.returncode == 0, run.output[-5000:]
    return run, baseline, folder


def test_the_baseline_sub_run_holds_the_baseline_points(compared: tuple) -> None:
    run, baseline, _ = compared
    written = {tag: dict(points) for tag, points in read_scalars(run.run_dir / "baseline").items()}
    assert written == baseline
    assert baseline[metrics.TRAIN_LOSS]


def test_compare_values_are_the_errors_of_both_runs(compared: tuple) -> None:
    run, baseline, _ = compared
    scalars = {tag: dict(points) for tag, points in read_scalars(run.run_dir).items()}
    for quantity in ("loss", "grad_norm"):
        tag, abs_tag, rel_tag, mean_abs_tag, mean_rel_tag = metrics.COMPARED[quantity]
        ours, base = scalars[tag], baseline[tag]
        steps = sorted(set(ours) & set(base))
        assert steps and sorted(scalars[abs_tag]) == steps
        abs_errors = [abs(ours[step] - base[step]) for step in steps]
        rel_errors = [abs(ours[step] - base[step]) / abs(base[step]) for step in steps]
        for index, step in enumerate(steps):
            mean_abs = math.fsum(abs_errors[: index + 1]) / (index + 1)
            mean_rel = math.fsum(rel_errors[: index + 1]) / (index + 1)
            for written, expected in (
                (scalars[abs_tag][step], abs_errors[index]),
                (scalars[rel_tag][step], rel_errors[index]),
                (scalars[mean_abs_tag][step], mean_abs),
                (scalars[mean_rel_tag][step], mean_rel),
            ):
                assert written == pytest.approx(expected, **FLOAT32), (quantity, step)
    # The same config and seed: the run follows its baseline until the shift.
    loss_errors = scalars[metrics.COMPARE_LOSS_ABS_ERR]
    assert max(error for step, error in loss_errors.items() if step < SHIFT_FROM) < 0.005
    assert min(error for step, error in loss_errors.items() if step >= SHIFT_FROM) > SHIFT - 0.005
    relative = scalars[metrics.COMPARE_GRAD_NORM_REL_ERR]
    assert max(error for step, error in relative.items() if step < SCALE_FROM) < 1e-5
    assert min(error for step, error in relative.items() if step >= SCALE_FROM) > 0.16


def test_baseline_divergence_names_the_first_divergent_step(compared: tuple) -> None:
    _, _, folder = compared
    alerts = [json.loads(line) for line in (folder / "alerts.jsonl").read_text().splitlines()]
    fired = {alert["tag"]: alert for alert in alerts[::-1] if alert["rule"] == "baseline_divergence"}  # the first
    assert sorted(fired) == [metrics.COMPARE_GRAD_NORM_REL_ERR, metrics.COMPARE_LOSS_REL_ERR], alerts
    for tag, compared_tag, first_step in (
        (metrics.COMPARE_LOSS_REL_ERR, metrics.TRAIN_LOSS, SHIFT_FROM),
        (metrics.COMPARE_GRAD_NORM_REL_ERR, metrics.TRAIN_GRAD_NORM, SCALE_FROM),
    ):
        alert = fired[tag]
        assert alert["incident"]["first_divergent_step"] == first_step
        assert alert["incident"]["compared"] == compared_tag
        assert f"first divergent step {first_step}" in alert["message"]
        # Within the window of 4 compared steps after the divergence (its means over both tolerances).
        assert first_step <= alert["step"] < first_step + 4


def test_hparams_carry_the_baseline_and_the_comparison_summary(compared: tuple) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    run, _, folder = compared
    accumulator = EventAccumulator(str(run.run_dir))
    accumulator.Reload()
    content = accumulator.SummaryMetadata(metadata.EXPERIMENT_TAG).plugin_data.content
    declared = [info.name.tag for info in metadata.parse_experiment_plugin_data(content).metric_infos]
    assert metrics.COMPARE_LOSS_MEAN_ABS_ERR in declared and metrics.COMPARE_LOSS_MEAN_REL_ERR in declared
    content = accumulator.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content
    hparams = metadata.parse_session_start_info_plugin_data(content).hparams
    assert hparams["baseline"].string_value == str(folder / "shifted_baseline")


# -- without a training ---------------------------------------------------------------------------------
def _run_folder(folder: Path, losses: dict[int, float]) -> Path:
    events = EventFile(folder)
    for step, loss in losses.items():
        events.write(encode_scalars_event(step, 1.0 + step, {metrics.TRAIN_LOSS: loss}))
    events.close()
    return folder


def test_steps_routed_while_the_baseline_is_read_are_compared_once_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real reader, held back until the first steps were routed (the only stand-in: the hold)."""
    source = _run_folder(tmp_path / "base", {1: 4.0, 2: 3.0, 3: 2.0})
    release = threading.Event()
    real = baseline_module.read_source

    def held(paths: list[Path]):
        release.wait(60)
        return real(paths)

    monkeypatch.setattr(baseline_module, "read_source", held)
    baseline = Baseline(source, tmp_path / "run")
    assert baseline.derive(1, {metrics.TRAIN_LOSS: 4.5, metrics.TRAIN_LR: 1.0}) == []
    assert baseline.derive(2, {metrics.TRAIN_LR: 1.0}) == []  # nothing compared: not kept
    release.set()
    assert baseline.drain(60) == [(1, pytest.approx(_errors(0.5, 0.125, 0.5, 0.125)))]
    derived = baseline.derive(3, {metrics.TRAIN_LOSS: 2.0})
    assert derived == [(3, pytest.approx(_errors(0.0, 0.0, 0.25, 0.0625)))]
    assert {tag: dict(points) for tag, points in read_scalars(tmp_path / "run" / "baseline").items()} == {
        metrics.TRAIN_LOSS: {1: 4.0, 2: 3.0, 3: 2.0}
    }


def _errors(abs_err: float, rel_err: float, mean_abs: float, mean_rel: float) -> dict[str, float]:
    return {
        metrics.COMPARE_LOSS_ABS_ERR: abs_err,
        metrics.COMPARE_LOSS_REL_ERR: rel_err,
        metrics.COMPARE_LOSS_MEAN_ABS_ERR: mean_abs,
        metrics.COMPARE_LOSS_MEAN_REL_ERR: mean_rel,
    }


def test_a_baseline_that_cannot_be_read_is_said_once_and_nothing_is_compared(tmp_path: Path) -> None:
    source = tmp_path / "notes.txt"
    source.write_text("not a run\n")
    with plugin_log() as messages:
        baseline = Baseline(source, tmp_path / "run")
        assert baseline.drain(60) == []
        assert baseline.derive(1, {metrics.TRAIN_LOSS: 1.0}) == []
    said = [message for message in messages if "could not be read" in message]
    assert len(said) == 1 and str(source) in said[0] and "training continues without it" in said[0]
    assert not (tmp_path / "run" / "baseline").exists()


def test_a_resumed_runs_baseline_sub_run_is_kept(tmp_path: Path) -> None:
    source = _run_folder(tmp_path / "base", {1: 4.0})
    kept = _run_folder(tmp_path / "run" / "baseline", {1: 9.0})
    Baseline(source, tmp_path / "run").drain(60)
    assert read_scalars(kept) == {metrics.TRAIN_LOSS: [(1, 9.0)]}


def test_a_missing_baseline_is_a_configuration_error_naming_its_yaml_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        TensorBoardOptions.of(
            {"log_dir": str(tmp_path / "tb"), "baseline": str(tmp_path / "gone")}, "TensorBoardMonitor"
        )
    assert f"baseline: {tmp_path / 'gone'} does not exist" in str(caught.value)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"callbacks:\n  - type: MFLossMonitor\n  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/tb\n"
        "    baseline: runs/gpu_baseline\n"
    )
    report = check_file(config, our_callbacks())
    assert report.exit_code == 1
    (error,) = [finding.render() for finding in report.errors]
    assert error.startswith("callbacks[1].baseline (line 5): ")
    assert "runs/gpu_baseline (from the working directory" in error and "does not exist" in error


def test_a_multi_rank_job_compares_the_data_parallel_mean_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two simulated ranks (threads, a summing collective: tests/fakes.py), aggregate_every 4: the loss
    compared is the mean the main run gets after the all-reduce (rank 0's own is 1 lower), and the grad
    norm the writing rank writes at once."""
    from fakes import FakeCollectives, Group, run_ranks

    from mindformers_tbplugin.callbacks.tensorboard_monitor import TensorBoardMonitor
    from mindformers_tbplugin.framework.model_facts import ModelFacts
    from mindformers_tbplugin.framework.trainers import StepEnd, TrainStart
    from mindformers_tbplugin.pipeline.topology import Topology
    from mindformers_tbplugin.session import monitor_session

    events = EventFile(tmp_path / "base")
    for step in range(1, 9):  # the job's mean loss is step + 1.5; its grad norm 0.1 x step
        events.write(encode_scalars_event(step, 1.0, {metrics.TRAIN_LOSS: step + 1.75, metrics.TRAIN_GRAD_NORM: 0.1}))
    events.close()
    group, ranks = Group(2), {}
    monkeypatch.setattr(monitor_session, "Collectives", lambda: FakeCollectives(group, ranks[threading.get_ident()]))
    off = {"log_hparams": False, "log_config": False, "log_graph": False, "log_eval": False, "log_memory": False}
    monitors = [
        TensorBoardMonitor(log_dir=str(tmp_path / "tb"), aggregate_every=4, baseline=str(tmp_path / "base"), **off)
        for _ in range(2)
    ]

    def script(rank: int):
        def run() -> None:
            ranks[threading.get_ident()] = rank
            topology = Topology(rank, 2, 1, "data_parallel", False, communicating=True)
            start = TrainStart(
                "classic", ModelFacts(), topology, None, None, 1, None, None, None, None, {}, lambda: None
            )
            monitors[rank].train_started(start)
            for step in range(1, 9):
                outputs = (step + 0.5 + 2.0 * rank, False, 1.0, 0.001, 0.1 * step)
                monitors[rank].step_ended(StepEnd(step, None, lambda _args, _step, outputs=outputs: outputs))
            monitors[rank].train_ended(None)

        return run

    run_ranks(group, [script(0), script(1)])
    (run_dir,) = (tmp_path / "tb").iterdir()
    main = {tag: dict(points) for tag, points in read_scalars(run_dir).items()}
    assert main[metrics.COMPARE_LOSS_ABS_ERR] == {step: 0.25 for step in range(1, 9)}
    assert main[metrics.COMPARE_GRAD_NORM_ABS_ERR] == pytest.approx(
        {s: abs(0.1 * s - 0.1) for s in range(1, 9)}, abs=1e-6
    )
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["baseline", "rank_0", "rank_1"]
    assert not (run_dir / "rank_1" / "baseline").exists()  # the writing rank's only


def test_a_held_back_step_routed_again_keeps_both_comparisons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A multi-rank job writes step 1's grad norm at once and its loss at the aggregation: when the
    baseline is read in between, both of step 1's comparisons reach the main run."""
    from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
    from mindformers_tbplugin.pipeline.topology import Topology
    from mindformers_tbplugin.tfevents.writer import RunWriter

    events = EventFile(tmp_path / "base")
    events.write(encode_scalars_event(1, 1.0, {metrics.TRAIN_LOSS: 2.0, metrics.TRAIN_GRAD_NORM: 0.5}))
    events.close()
    release, real = threading.Event(), baseline_module.read_source
    monkeypatch.setattr(baseline_module, "read_source", lambda paths: release.wait(60) and real(paths))
    baseline = Baseline(tmp_path / "base", tmp_path / "run")
    writer = RunWriter(tmp_path / "run")
    options = RouterOptions(0, "writer", 0, False, False, None, None)
    router = MetricRouter(Topology(0, 1, 1, "stand_alone", False, False), options, writer, None, None, None, baseline)
    router.log_values(1, {metrics.TRAIN_GRAD_NORM: 0.75}, metrics.MetricKind.MODEL)  # held back
    release.set()
    assert baseline._done.wait(60)  # read now; the held-back step still waits (drain would hand it out)
    router.log_values(1, {metrics.TRAIN_LOSS: 2.5}, metrics.MetricKind.DATA)
    router.finish(clean=True)
    writer.close()
    main = {tag: dict(points) for tag, points in read_scalars(tmp_path / "run").items()}
    assert main[metrics.COMPARE_GRAD_NORM_ABS_ERR] == {1: 0.25}
    assert main[metrics.COMPARE_LOSS_ABS_ERR] == {1: 0.5}


def test_a_baseline_of_means_written_by_mftb_import_is_compared_with_the_runs_means(tmp_path: Path) -> None:
    """A Megatron-style baseline (each loss a mean over the 4 steps up to it), as ``mftb import`` writes
    it (mftb_import.json keeps averaged_over): compared at its steps with the mean of the run's steps."""
    from mindformers_tbplugin.imports.imported_run import ImportedRun
    from mindformers_tbplugin.imports.run_writer import write_run

    imported = ImportedRun(source=[tmp_path / "megatron.log"], format="megatron-log")
    for step in (4, 8):
        imported.add(metrics.TRAIN_LOSS, step, 10.0 - step)
    imported.averaged_over[metrics.TRAIN_LOSS] = 4
    write_run(imported, tmp_path / "imported")
    baseline = Baseline(tmp_path / "imported", tmp_path / "run")
    assert baseline.drain(60) == []
    run = {step: 10.0 - step + 0.1 * step for step in range(1, 9)}
    derived = [pair for step, loss in run.items() for pair in baseline.derive(step, {metrics.TRAIN_LOSS: loss})]
    assert [step for step, _ in derived] == [4, 8]
    for step, found in derived:
        mean = sum(run[s] for s in range(step - 3, step + 1)) / 4
        assert found[metrics.COMPARE_LOSS_ABS_ERR] == pytest.approx(abs(mean - (10.0 - step)))
    assert read_scalars(tmp_path / "run" / "baseline") == {metrics.TRAIN_LOSS: [(4, 6.0), (8, 2.0)]}


def test_a_megatron_log_baseline_is_compared_over_its_log_interval(tmp_path: Path) -> None:
    """Megatron-LM's printed log (training_log's fields at main: means over --log-interval 4 steps, the
    grad norm with 3 decimals), read by its reader: at its iterations, the run's mean over the same 4
    steps against the printed mean; the grad norm's rounding is no difference."""
    lines = []
    for it in (4, 8):
        fields = {
            "consumed samples": f"{it * 32:12d}",
            "elapsed time per iteration (ms)": "1234.6",
            "learning rate": f"{3e-4:.6E}",
            "global batch size": f"{32:5d}",
            "lm loss": f"{10.0 - it:.6E}",
            "loss scale": "1.0",
            "grad norm": f"{0.5 + it / 100:.3f}",
            "number of skipped iterations": f"{0:3d}",
            "number of nan iterations": f"{0:3d}",
        }
        head = f" [2024-05-01 10:00:{it:02d}.250000] iteration {it:8d}/{8:8d} |"
        lines.append(head + "".join(f" {key}: {value} |" for key, value in fields.items()))
    (tmp_path / "train.log").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    baseline = Baseline(tmp_path / "train.log", tmp_path / "run")
    assert baseline.drain(60) == []
    run = {step: 10.0 - step + 0.05 * step for step in range(1, 9)}
    found = {}
    for step, loss in run.items():  # the run's grad norm within the printed value's rounding, then beyond
        grad_norm = 0.5 + step / 100 + (0.0004 if step == 4 else 0.002)
        found.update(baseline.derive(step, {metrics.TRAIN_LOSS: loss, metrics.TRAIN_GRAD_NORM: grad_norm}))
    assert sorted(found) == [4, 8]
    for step in (4, 8):
        mean = sum(run[s] for s in range(step - 3, step + 1)) / 4
        assert found[step][metrics.COMPARE_LOSS_ABS_ERR] == pytest.approx(abs(mean - (10.0 - step)))
    assert found[4][metrics.COMPARE_GRAD_NORM_ABS_ERR] == 0.0  # 0.0004 under the printed 0.0005
    assert found[8][metrics.COMPARE_GRAD_NORM_ABS_ERR] > 0.0
