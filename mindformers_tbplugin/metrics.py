"""Turn what a training step produced into plain floats, tagged with a kind. No I/O, no communication.

Tag names are spelled here and nowhere else; a tag's meaning never changes between versions.
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class MetricKind(str, enum.Enum):
    """How a metric is combined across ranks.

    * ``data``: depends on the rank's batch (loss); averaged over data-parallel ranks.
    * ``model``: identical on the ranks that hold it (lr, grad norm); written once.
    * ``system``: a property of the rank (step time, memory); written per rank.
    """

    DATA = "data"
    MODEL = "model"
    SYSTEM = "system"


# Tag names -----------------------------------------------------------------------------------
TRAIN_LOSS = "train/loss"
TRAIN_LR = "train/lr"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_LOSS_SCALE = "train/loss_scale"
TRAIN_OVERFLOW = "train/overflow"
TRAIN_PARAM_NORM = "train/param_norm"
PERF_STEP_TIME_MS = "perf/step_time_ms"
PERF_SAMPLES_PER_S = "perf/samples_per_s"
PERF_TOKENS_PER_S = "perf/tokens_per_s"
SYSTEM_HOST_RSS_GB = "system/host_rss_gb"
SYSTEM_DEVICE_MEM_ALLOCATED_GB = "system/device_mem_allocated_gb"
SYSTEM_DEVICE_MEM_PEAK_GB = "system/device_mem_peak_gb"
EVAL_PREFIX = "eval/"
EVAL_LOSS = "eval/loss"
EVAL_PERPLEXITY = "eval/perplexity"
META_RESTART = "meta/restart"  # scalar: the step resumed from; text: what was resumed
META_STATUS = "meta/status"  # text: completed / failed / terminated at step N
VS_SAMPLES_SUFFIX = "_vs_samples"
VS_TOKENS_SUFFIX = "_vs_tokens"
# Tags that get "vs samples"/"vs tokens" twins when those x-axes are enabled.
X_AXIS_VARIANT_TAGS = (TRAIN_LOSS, TRAIN_LR)


@dataclass
class StepMetrics:
    """One logged step's values, grouped by kind."""

    step: int
    data: dict[str, float] = field(default_factory=dict)
    model: dict[str, float] = field(default_factory=dict)
    system: dict[str, float] = field(default_factory=dict)

    def by_kind(self, kind: MetricKind) -> dict[str, float]:
        return {MetricKind.DATA: self.data, MetricKind.MODEL: self.model, MetricKind.SYSTEM: self.system}[kind]

    def merged(self) -> dict[str, float]:
        return {**self.data, **self.model, **self.system}


def _scalar(value: Any) -> float | None:
    """A float from a Tensor / numpy array / Python number (mean of an array), None if absent."""
    if value is None:
        return None
    if hasattr(value, "asnumpy"):
        if getattr(value, "size", 0) == 1:
            # One element: item() copies it out directly; asnumpy() builds an array through the buffer
            # protocol, whose format string numpy parses in Python (~4 µs per tensor, 5 tensors per step).
            with contextlib.suppress(TypeError, ValueError, RuntimeError):
                return float(value.item())
        value = value.asnumpy()
    if hasattr(value, "mean") and getattr(value, "size", 1) != 1:
        value = value.mean()
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class TrainOutputs:
    loss: float | None
    overflow: float | None
    loss_scale: float | None
    lr: float | None
    grad_norm: float | None


def read_net_outputs(net_outputs: Any) -> TrainOutputs:
    """Read a step's network outputs.

    MindFormers' train wrappers return ``(loss, overflow, loss_scale[, lr[, global_norm[, ...]]])``
    (the layout MFLossMonitor reads); a plain MindSpore network returns the loss alone.
    """
    if isinstance(net_outputs, (tuple, list)):
        if len(net_outputs) in (3, 4, 5, 7):
            loss, overflow, loss_scale, *rest = net_outputs
            lr = rest[0] if rest else None
            grad_norm = rest[1] if len(rest) >= 2 else None
            return TrainOutputs(_scalar(loss), _scalar(overflow), _scalar(loss_scale), _scalar(lr), _scalar(grad_norm))
        net_outputs = net_outputs[0] if net_outputs else None
    return TrainOutputs(_scalar(net_outputs), None, None, None, None)


def static_learning_rate(optimizer: Any) -> float | None:
    """The optimizer's learning rate when it is a fixed value (not a per-step schedule)."""
    if optimizer is None or getattr(optimizer, "dynamic_lr", True) or getattr(optimizer, "is_group_lr", False):
        return None
    return _scalar(getattr(optimizer, "learning_rate", None))


def train_metrics(step: int, outputs: TrainOutputs) -> StepMetrics:
    """The must-have and diagnostic training tags that ``outputs`` can provide."""
    metrics = StepMetrics(step)
    if outputs.loss is not None:
        metrics.data[TRAIN_LOSS] = outputs.loss
    for tag, value in (
        (TRAIN_LR, outputs.lr),
        (TRAIN_GRAD_NORM, outputs.grad_norm),
        (TRAIN_LOSS_SCALE, outputs.loss_scale),
        (TRAIN_OVERFLOW, outputs.overflow),
    ):
        if value is not None:
            metrics.model[tag] = value
    return metrics


def throughput(step_time_s: float, samples_per_step: float | None, tokens_per_sample: int | None) -> dict[str, float]:
    """Step time and throughput tags for an average step of ``step_time_s`` seconds."""
    values = {PERF_STEP_TIME_MS: step_time_s * 1000.0}
    if step_time_s > 0 and samples_per_step:
        values[PERF_SAMPLES_PER_S] = samples_per_step / step_time_s
        if tokens_per_sample:
            values[PERF_TOKENS_PER_S] = samples_per_step * tokens_per_sample / step_time_s
    return values


def x_axis_variants(values: dict[str, float], suffix: str) -> dict[str, float]:
    """Twins of the x-axis variant tags, e.g. ``train/loss_vs_tokens``."""
    return {tag + suffix: values[tag] for tag in X_AXIS_VARIANT_TAGS if tag in values}


def global_norm(arrays: Iterable[Any]) -> float:
    """L2 norm over all ``arrays`` (numpy arrays), accumulated in float64."""
    total = 0.0
    for array in arrays:
        flat = array.astype("float64", copy=False).ravel()
        total += float(flat @ flat)
    return math.sqrt(total)
