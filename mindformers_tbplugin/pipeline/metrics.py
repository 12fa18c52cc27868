"""Turn what a training step produced into plain floats, tagged with a kind. No I/O, no communication.

Tag names are spelled here and nowhere else; a tag's meaning never changes between versions.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
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
# The parts of an mcore model's loss (MoE / multi-token prediction), as their contributions to train/loss.
TRAIN_LOSS_LM = "train/loss_lm"
TRAIN_LOSS_MTP = "train/loss_mtp"
TRAIN_LOSS_AUX = "train/loss_aux"
TRAIN_LOSS_INDEXER = "train/loss_indexer"
LOSS_AUX_PREFIX = "loss_aux/"  # one MoE layer's part of train/loss_aux (PyNative trainer: per-layer trackers)
# Multi-rank jobs: the highest train/loss of the data-parallel ranks at a logged step, and which rank.
TRAIN_LOSS_MAX = "train/loss_max"
TRAIN_LOSS_MAX_RANK = "train/loss_max_rank"
PERF_STEP_TIME_MS = "perf/step_time_ms"
# The job's samples (tokens) per step over this rank's own average step time.
PERF_SAMPLES_PER_S = "perf/samples_per_s"
PERF_TOKENS_PER_S = "perf/tokens_per_s"
# Per aggregation interval: the sum over data-parallel replicas of each replica's own rate.
PERF_JOB_SAMPLES_PER_S = "perf/job_samples_per_s"
PERF_JOB_TOKENS_PER_S = "perf/job_tokens_per_s"
# Model FLOPs per second per device (MindFormers' formula), and its share of the device's peak.
PERF_LINEARITY = "perf/linearity"  # samples/s per device over throughput_baseline
PERF_MODEL_TFLOPS = "perf/model_tflops_per_device"
PERF_MFU = "perf/mfu"
# Jobs on several nodes (pipeline/slow_nodes.py): the straggler's node, the nodes with every rank slow.
RANKS_STRAGGLER_NODE = "ranks/step_time_ms_argmax_node"
RANKS_SLOW_NODES = "ranks/slow_nodes"
RANKS_SLOW_NODE_NAMES = "ranks/slow_node_names"  # text: which nodes, when that set changes
SYSTEM_HOST_RSS_GB = "system/host_rss_gb"
SYSTEM_DEVICE_MEM_ALLOCATED_GB = "system/device_mem_allocated_gb"
SYSTEM_DEVICE_MEM_PEAK_GB = "system/device_mem_peak_gb"
EVAL_PREFIX = "eval/"
# Per-layer norms (runner_wrapper.local_norm): grad_norm/<group>, param_norm/<group>.
GRAD_NORM_PREFIX = "grad_norm/"
PARAM_NORM_PREFIX = "param_norm/"
ADAM_M_NORM_PREFIX = "adam_m_norm/"  # Adam's first moment per group, every optimizer_state_every steps
ADAM_V_NORM_PREFIX = "adam_v_norm/"  # ... and its second moment
UPDATE_NORM_PREFIX = "update_norm/"  # the step's parameter change per group, same schedule
ATTENTION_LOGIT_MAX_PREFIX = "attention_logit_max/"  # per layer, every attention_logit_every steps
ATTENTION_LOGIT_MAX_ALL = "attention_logit_max/all"  # ... and over every layer
UPDATE_RATIO_PREFIX = "update_ratio/"  # ... over the group's parameter norm before the step
WEIGHT_STABLE_RANK_PREFIX = "weight_stable_rank/"  # per chosen weight, every stable_rank_every steps
WEIGHT_EIGENVALUE_PREFIX = "weight_eigenvalue/"  # ... the largest eigenvalue of WᵀW
# What a 3-D (expert stack) weight writes (stable_rank_experts, TrainingStateMonitor's moe_show_mode):
# the per-expert max/min/mean, every expert's value, or both.
STABLE_RANK_EXPERT_VALUES = ("statistics", "full", "all")
GRAD_NORM_TOTAL = "grad_norm/total"  # over all groups: the pre-reduction norm, whether clipping is on or off
GRAD_NORM_HISTOGRAM = "grad_norm/per_param_log10"  # histogram of log10 per-parameter gradient norms
# Mixture-of-experts routing (pipeline/expert_load.py): moe/<group>/<statistic>, and over all layers.
MOE_PREFIX = "moe/"
MOE_LAYER_STATISTICS = ("max_violation", "min_load", "dead_experts")
MOE_BIAS_RANGE = "bias_range"
MOE_MAX_VIOLATION = "moe/max_violation"
MOE_DEAD_EXPERTS = "moe/dead_experts"
EVAL_LOSS = "eval/loss"
EVAL_PERPLEXITY = "eval/perplexity"
RUN_CONFIG = "run/config"  # text: the resolved YAML, secrets masked
RUN_PARAMETERS = "run/parameters"  # text: parameter counts per block
META_RESTART = "meta/restart"  # scalar: the step resumed from; text: what was resumed
META_STATUS = "meta/status"  # text: completed / failed / terminated at step N
# A run against its baseline (TensorBoardMonitor's ``baseline``): at each logged step the baseline has,
# the step's absolute and relative errors, and their running means over the steps compared so far.
COMPARE_PREFIX = "compare/"
COMPARE_LOSS_ABS_ERR = "compare/loss_abs_err"
COMPARE_LOSS_REL_ERR = "compare/loss_rel_err"
COMPARE_LOSS_MEAN_ABS_ERR = "compare/loss_mean_abs_err"
COMPARE_LOSS_MEAN_REL_ERR = "compare/loss_mean_rel_err"
COMPARE_GRAD_NORM_ABS_ERR = "compare/grad_norm_abs_err"
COMPARE_GRAD_NORM_REL_ERR = "compare/grad_norm_rel_err"
COMPARE_GRAD_NORM_MEAN_ABS_ERR = "compare/grad_norm_mean_abs_err"
COMPARE_GRAD_NORM_MEAN_REL_ERR = "compare/grad_norm_mean_rel_err"
# quantity -> (the run's tag, its abs err, rel err, mean abs err, mean rel err)
COMPARED = {
    "loss": (
        TRAIN_LOSS,
        COMPARE_LOSS_ABS_ERR,
        COMPARE_LOSS_REL_ERR,
        COMPARE_LOSS_MEAN_ABS_ERR,
        COMPARE_LOSS_MEAN_REL_ERR,
    ),
    "grad_norm": (
        TRAIN_GRAD_NORM,
        COMPARE_GRAD_NORM_ABS_ERR,
        COMPARE_GRAD_NORM_REL_ERR,
        COMPARE_GRAD_NORM_MEAN_ABS_ERR,
        COMPARE_GRAD_NORM_MEAN_REL_ERR,
    ),
}
# Runs brought in by ``mftb import``: tags of no equivalent keep their name under this prefix; the text
# says where the run came from and what was not imported.
IMPORT_PREFIX = "import/"
IMPORT_SOURCE = "import/source"
# What an imported run may record of its batches: the samples consumed through each step and the global
# batch size (Megatron-LM's `consumed samples`, `global batch size`; MindFormers' PyNative trainer line).
IMPORTED_CONSUMED_SAMPLES = IMPORT_PREFIX + "consumed_samples"
IMPORTED_GLOBAL_BATCH_SIZE = IMPORT_PREFIX + "global_batch_size"
VS_SAMPLES_SUFFIX = "_vs_samples"
VS_TOKENS_SUFFIX = "_vs_tokens"
# Tags that get "vs samples"/"vs tokens" twins when those x-axes are enabled.
X_AXIS_VARIANT_TAGS = (TRAIN_LOSS, TRAIN_LR)
# Net outputs 1-4 in MindFormers' layout, after the loss.
_OUTPUT_TAGS = (TRAIN_OVERFLOW, TRAIN_LOSS_SCALE, TRAIN_LR, TRAIN_GRAD_NORM)
_WRAPPER_LAYOUTS = (3, 4, 5, 7)  # output counts of MindFormers' train wrappers (7: with local norms)

# Tags the monitor writes by itself (for checking what alert rules watch); the families whose names
# depend on the run are prefixes. Any other tag comes from extra_metrics or log_scalars.
BUILTIN_TAGS = frozenset(
    value
    for name, value in dict(globals()).items()
    if name.startswith(("TRAIN_", "PERF_", "SYSTEM_", "EVAL_", "META_", "GRAD_NORM_TOTAL", "COMPARE_"))
    and not value.endswith("/")
)
BUILTIN_FAMILIES = (
    EVAL_PREFIX,
    GRAD_NORM_PREFIX,
    PARAM_NORM_PREFIX,
    ADAM_M_NORM_PREFIX,
    ADAM_V_NORM_PREFIX,
    MOE_PREFIX,
    LOSS_AUX_PREFIX,
    "ranks/",
    "local/",
    "alerts/",
)
_X_AXIS_TWINS = frozenset(t + suffix for t in X_AXIS_VARIANT_TAGS for suffix in (VS_SAMPLES_SUFFIX, VS_TOKENS_SUFFIX))


def on_step_axis(tag: str) -> bool:
    """False for the "vs samples" / "vs tokens" twins, written at a step that counts samples or tokens."""
    return not tag.endswith((VS_SAMPLES_SUFFIX, VS_TOKENS_SUFFIX))


def is_builtin_tag(tag: str) -> bool:
    return tag in BUILTIN_TAGS or tag in _X_AXIS_TWINS or tag.startswith(BUILTIN_FAMILIES)


class StepMetrics:
    """One logged step's values, grouped by kind. A plain class: one is built per logged step."""

    __slots__ = ("data", "expert_load", "grad_squares", "model", "step", "system")

    def __init__(
        self,
        step: int,
        data: dict[str, float] | None = None,
        model: dict[str, float] | None = None,
        system: dict[str, float] | None = None,
    ) -> None:
        self.step = step
        self.data = {} if data is None else data
        self.model = {} if model is None else model
        self.system = {} if system is None else system
        self.grad_squares: Any = None  # per-parameter squared gradient norms (numpy), when the wrapper returns them
        self.expert_load: Any = None  # (loads, bias): the MoE routers' per-expert load of this step, when read

    def by_kind(self, kind: MetricKind) -> dict[str, float]:
        return {MetricKind.DATA: self.data, MetricKind.MODEL: self.model, MetricKind.SYSTEM: self.system}[kind]

    def merged(self) -> dict[str, float]:
        return {**self.data, **self.model, **self.system}


def _scalar(value: Any) -> float | None:
    """A float from a Tensor / numpy array / Python number (mean of an array), None if absent.

    The one-element case comes first and costs one ``item()`` call: it runs for five tensors at every
    logged step, when the training has just evicted the interpreter's data from the CPU caches, so
    each extra Python-level check shows in the step time.
    """
    if value is None:
        return None
    try:
        return float(value.item())
    except AttributeError:  # a Python number
        pass
    except (TypeError, ValueError, RuntimeError):  # several elements: their mean
        if hasattr(value, "asnumpy"):
            value = value.asnumpy()
        value = value.mean() if hasattr(value, "mean") else value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _wrapper_metrics(step: int, net_outputs: tuple) -> StepMetrics | None:
    """The common case of :func:`train_metrics`, in as few Python-level operations as possible (see
    ``_scalar``): every output a one-element number. None when one is absent, not a number or several
    elements: the general path reads those."""
    try:
        loss, *rest = [float(value.item()) for value in net_outputs[:5]]
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
    return StepMetrics(step, {TRAIN_LOSS: loss}, dict(zip(_OUTPUT_TAGS, rest, strict=False)))


def train_metrics(step: int, net_outputs: Any) -> StepMetrics:
    """The must-have and diagnostic training tags of one step's network outputs.

    MindFormers' train wrappers return ``(loss, overflow, loss_scale[, lr[, global_norm[, ...]]])``
    (the layout MFLossMonitor reads); a plain MindSpore network returns the loss alone.
    """
    if type(net_outputs) is tuple and len(net_outputs) in _WRAPPER_LAYOUTS:
        read = _wrapper_metrics(step, net_outputs)
        if read is not None:
            return read
    model: dict[str, float] = {}
    if isinstance(net_outputs, (tuple, list)):
        if len(net_outputs) in _WRAPPER_LAYOUTS:
            loss = _scalar(net_outputs[0])
            for tag, value in zip(_OUTPUT_TAGS, net_outputs[1:5], strict=False):
                number = _scalar(value)
                if number is not None:
                    model[tag] = number
        else:
            loss = _scalar(net_outputs[0]) if net_outputs else None
    else:
        loss = _scalar(net_outputs)
    return StepMetrics(step, {} if loss is None else {TRAIN_LOSS: loss}, model)


def local_norm_output(net_outputs: Any) -> Any:
    """The per-parameter squared gradient norms that MindFormers' wrappers return as their sixth
    output with ``local_norm: True`` (a tensor), or None."""
    if isinstance(net_outputs, (tuple, list)) and len(net_outputs) == 7:
        return net_outputs[5]
    return None


def static_learning_rate(optimizer: Any) -> float | None:
    """The optimizer's learning rate when it is a fixed value (not a per-step schedule)."""
    if optimizer is None or getattr(optimizer, "dynamic_lr", True) or getattr(optimizer, "is_group_lr", False):
        return None
    return _scalar(getattr(optimizer, "learning_rate", None))


def linearity(values: dict[str, float], devices: int, baseline: float | None) -> dict[str, float]:
    """``perf/linearity``: the job's samples per second per device (of ``values``' ``perf/samples_per_s``)
    over the baseline, as MindFormers' TrainingStateMonitor computes ``throughput_linearity``."""
    rate = values.get(PERF_SAMPLES_PER_S)
    return {PERF_LINEARITY: rate / max(devices, 1) / baseline} if baseline and rate is not None else {}


def throughput(step_time_s: float, samples_per_step: float | None, tokens_per_sample: int | None) -> dict[str, float]:
    """Step time and throughput tags for an average step of ``step_time_s`` seconds;
    ``samples_per_step`` counts the whole job's samples (all data-parallel replicas)."""
    values = {PERF_STEP_TIME_MS: step_time_s * 1000.0}
    if step_time_s > 0 and samples_per_step:
        values[PERF_SAMPLES_PER_S] = samples_per_step / step_time_s
        if tokens_per_sample:
            values[PERF_TOKENS_PER_S] = samples_per_step * tokens_per_sample / step_time_s
    return values


def x_axis_variants(values: dict[str, float], suffix: str) -> dict[str, float]:
    """Twins of the x-axis variant tags, e.g. ``train/loss_vs_tokens``."""
    return {tag + suffix: values[tag] for tag in X_AXIS_VARIANT_TAGS if tag in values}


def squared_norm(array: Any) -> float:
    """Sum of squares of a numpy array, in float64."""
    flat = array.astype("float64", copy=False).ravel()
    return float(flat @ flat)


def global_norm(arrays: Iterable[Any]) -> float:
    """L2 norm over all ``arrays`` (numpy arrays), accumulated in float64."""
    return math.sqrt(sum(squared_norm(array) for array in arrays))
