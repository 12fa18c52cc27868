"""What the runs are compared along: the global step, or the samples or tokens consumed.

TensorBoardMonitor writes ``train/loss_vs_samples`` and ``train/loss_vs_tokens`` (and ``train/lr_...``)
with ``vs_samples`` / ``vs_tokens``: the loss at the step whose x is the number of samples (tokens)
consumed. Along samples a value's window is its steps times the samples per step, learnt from the
twin's x against the tag's own steps; runs with different global batch sizes are then compared over
their common windows of samples."""

from __future__ import annotations

import numpy as np

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.imported_run import ImportedRun, Series
from mindformers_tbplugin.pipeline import metrics

AXES = ("steps", "samples", "tokens")
_SUFFIX = {"samples": metrics.VS_SAMPLES_SUFFIX, "tokens": metrics.VS_TOKENS_SUFFIX}
_OPTION = {"samples": "vs_samples", "tokens": "vs_tokens"}


def units_per_step(run: ImportedRun, axis: str, tag: str = metrics.TRAIN_LOSS) -> int | None:
    """The samples (tokens) of one step, when the run's ``tag`` twin on ``axis`` says so: every point's
    x is the same multiple of its step."""
    twin, own = run.scalars.get(tag + _SUFFIX[axis]), run.scalars.get(tag)
    if not twin or not own or len(twin) != len(own):
        return None
    xs, steps = np.sort(np.fromiter(twin, np.int64, len(twin))), np.sort(np.fromiter(own, np.int64, len(own)))
    if steps[0] <= 0 or np.any(xs % steps) or len(np.unique(xs // steps)) != 1:
        return None
    return int(xs[0] // steps[0])


def has_axis(run: ImportedRun, tag: str, axis: str) -> bool:
    return axis == "steps" or tag + _SUFFIX[axis] in run.scalars


def series(run: ImportedRun, tag: str, axis: str) -> tuple[Series, int]:
    """The tag's points along ``axis`` and the window of each point in that axis' units."""
    steps_window = run.averaged_over.get(tag, 1)
    if axis == "steps":
        return run.scalars[tag], steps_window
    per_step = units_per_step(run, axis, tag)
    return run.scalars[tag + _SUFFIX[axis]], steps_window * per_step if per_step else 1


def missing_axis(name: str, axis: str) -> UsageError:
    return UsageError(
        f"{name} has no train/loss{_SUFFIX[axis]}: it cannot be compared by {axis} consumed (TensorBoardMonitor "
        f"writes it with {_OPTION[axis]}: true; a run imported from another tool has it only if that tool "
        "recorded the consumed samples)"
    )


def batch_mismatch(run: ImportedRun, base: ImportedRun) -> str | None:
    """Why comparing by step would compare different amounts of training, when both runs say their
    samples per step and they differ."""
    run_batch, base_batch = units_per_step(run, "samples"), units_per_step(base, "samples")
    if run_batch is None or base_batch is None or run_batch == base_batch:
        return None
    return (
        f"the run consumes {run_batch} samples per step and the baseline {base_batch} (different global batch "
        "sizes): the same step is a different amount of training; compare by samples or tokens consumed (--x "
        "samples, --x tokens)"
    )
