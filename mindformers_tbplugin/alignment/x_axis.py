"""What the runs are compared along: the global step, or the samples or tokens consumed.

TensorBoardMonitor writes ``train/loss_vs_samples`` and ``train/loss_vs_tokens`` (and ``train/lr_...``)
with ``vs_samples`` / ``vs_tokens``: the loss at the step whose x is the number of samples (tokens)
consumed. An imported run that printed its consumed samples (Megatron-LM) has them per step instead.
Along samples a value's window is its steps times the samples per step; runs with different global
batch sizes are then compared over their common windows of samples."""

from __future__ import annotations

import numpy as np

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.imported_run import ImportedRun, Series
from mindformers_tbplugin.pipeline import metrics

AXES = ("steps", "samples", "tokens")
_SUFFIX = {"samples": metrics.VS_SAMPLES_SUFFIX, "tokens": metrics.VS_TOKENS_SUFFIX}
_OPTION = {"samples": "vs_samples", "tokens": "vs_tokens"}


def _constant_ratio(xs: np.ndarray, steps: np.ndarray) -> int | None:
    """The one integer x / step of every pair, if there is one."""
    if not len(steps) or steps[0] <= 0 or np.any(xs % steps) or len(np.unique(xs // steps)) != 1:
        return None
    return int(xs[0] // steps[0])


def units_per_step(run: ImportedRun, axis: str, tag: str = metrics.TRAIN_LOSS) -> int | None:
    """The samples (tokens) of one step, when the run says so: the ``tag`` twin's x is the same multiple
    of its step at every point; for samples, else an imported run's constant global batch size, or its
    consumed samples the same multiple of the step throughout."""
    twin, own = run.scalars.get(tag + _SUFFIX[axis]), run.scalars.get(tag)
    if twin and own and len(twin) == len(own):
        xs, steps = np.sort(np.fromiter(twin, np.int64, len(twin))), np.sort(np.fromiter(own, np.int64, len(own)))
        return _constant_ratio(xs, steps)
    if axis != "samples":
        return None
    batches = set(run.scalars.get(metrics.IMPORTED_GLOBAL_BATCH_SIZE, {}).values())
    if len(batches) == 1 and float(next(iter(batches))).is_integer():
        return int(next(iter(batches)))
    consumed = run.scalars.get(metrics.IMPORTED_CONSUMED_SAMPLES)
    if consumed:
        steps = np.fromiter(consumed, np.int64, len(consumed))
        return _constant_ratio(np.fromiter(consumed.values(), np.float64, len(consumed)).astype(np.int64), steps)
    return None


def has_axis(run: ImportedRun, tag: str, axis: str) -> bool:
    if axis == "steps" or tag + _SUFFIX[axis] in run.scalars:
        return True
    return axis == "samples" and tag in run.scalars and metrics.IMPORTED_CONSUMED_SAMPLES in run.scalars


def series(run: ImportedRun, tag: str, axis: str) -> tuple[Series, int]:
    """The tag's points along ``axis`` (TensorBoardMonitor's twin, or for samples an imported run's
    points placed at its consumed samples) and the window of each point in that axis' units."""
    steps_window = run.averaged_over.get(tag, 1)
    if axis == "steps":
        return run.scalars[tag], steps_window
    per_step = units_per_step(run, axis, tag)
    window = steps_window * per_step if per_step else 1
    twin = run.scalars.get(tag + _SUFFIX[axis])
    if twin is not None:
        return twin, window
    consumed = run.scalars[metrics.IMPORTED_CONSUMED_SAMPLES]
    return {int(consumed[step]): value for step, value in run.scalars[tag].items() if step in consumed}, window


def missing_axis(name: str, axis: str) -> UsageError:
    return UsageError(
        f"{name} has no train/loss{_SUFFIX[axis]}"
        + (f" nor {metrics.IMPORTED_CONSUMED_SAMPLES}" if axis == "samples" else "")
        + f": it cannot be compared by {axis} consumed (TensorBoardMonitor writes it with {_OPTION[axis]}: true; "
        "a run imported from another tool, only if that tool printed the samples it consumed)"
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
