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
from pathlib import Path

import pytest

from conftest import TrainingRun, read_scalars, train, write_tiny_config
from mindformers_tbplugin.pipeline import metrics
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
