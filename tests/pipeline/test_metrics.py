"""Step outputs to tagged floats (pipeline/metrics.py): the tags read from MindFormers' train-wrapper
outputs of each layout (and a plain network's loss), the sixth output holding per-parameter squared
norms, a fixed learning rate, throughput and x-axis twins, float64 norms, which tags are built-in, and
StepMetrics' kinds."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.metrics import MetricKind, StepMetrics

LOSS, OVERFLOW, SCALE, LR, GRAD = (
    metrics.TRAIN_LOSS,
    metrics.TRAIN_OVERFLOW,
    metrics.TRAIN_LOSS_SCALE,
    metrics.TRAIN_LR,
    metrics.TRAIN_GRAD_NORM,
)


# -- the network's outputs -----------------------------------------------------------------------------
def test_the_five_outputs_of_a_mindformers_wrapper_are_loss_overflow_scale_lr_and_grad_norm() -> None:
    outputs = (np.float32(2.5), np.bool_(False), np.float32(1024.0), np.float32(0.5), np.float32(1.25))
    step = metrics.train_metrics(7, outputs)
    assert step.step == 7
    assert step.data == {LOSS: 2.5}  # the loss depends on the rank's batch: averaged over ranks
    assert step.model == {OVERFLOW: 0.0, SCALE: 1024.0, LR: 0.5, GRAD: 1.25}
    assert step.system == {}


def test_a_wrapper_without_lr_and_grad_norm_gives_what_it_has() -> None:
    step = metrics.train_metrics(1, (np.float32(3.0), True, 65536.0))
    assert (step.data, step.model) == ({LOSS: 3.0}, {OVERFLOW: 1.0, SCALE: 65536.0})
    step = metrics.train_metrics(1, (np.float32(3.0), False, 1.0, 0.25))  # four outputs: + lr
    assert step.model == {OVERFLOW: 0.0, SCALE: 1.0, LR: 0.25}


def test_with_local_norm_the_sixth_output_is_the_per_parameter_squares_not_a_tag() -> None:
    squares = np.array([1.0, 4.0, 9.0])
    outputs = (2.0, False, 1.0, 0.5, 3.0, squares, np.float32(7.0))
    step = metrics.train_metrics(2, outputs)
    assert (step.data, step.model) == ({LOSS: 2.0}, {OVERFLOW: 0.0, SCALE: 1.0, LR: 0.5, GRAD: 3.0})
    assert metrics.local_norm_output(outputs) is squares
    assert metrics.local_norm_output(outputs[:5]) is None  # only the seven-output layout has them
    assert metrics.local_norm_output(np.float32(2.0)) is None


def test_another_layout_gives_the_loss_alone() -> None:
    # Two or six outputs are not MindFormers' layout: the first is still the loss, the rest unknown.
    assert metrics.train_metrics(1, (2.0, 0.5)).merged() == {LOSS: 2.0}
    assert metrics.train_metrics(1, [2.0, False, 1.0, 0.5, 3.0, 9.0]).merged() == {LOSS: 2.0}
    assert metrics.train_metrics(1, ()).merged() == {}


def test_a_plain_networks_loss_of_several_elements_is_their_mean() -> None:
    assert metrics.train_metrics(1, np.float32(1.5)).data == {LOSS: 1.5}
    assert metrics.train_metrics(1, np.array([1.0, 2.0, 3.0, 6.0])).data == {LOSS: 3.0}  # 12 / 4


def test_missing_or_non_numeric_outputs_write_no_tag() -> None:
    step = metrics.train_metrics(1, (None, False, None, "warmup", 1.0))
    assert step.data == {}  # no loss: no train/loss, rather than a made-up value
    assert step.model == {OVERFLOW: 0.0, GRAD: 1.0}
    assert metrics.train_metrics(1, None).merged() == {}


def test_the_learning_rate_of_an_optimizer_is_read_only_when_it_is_fixed() -> None:
    """The attributes MindSpore's optimizers carry: ``dynamic_lr``, ``is_group_lr``, ``learning_rate``."""
    fixed = SimpleNamespace(dynamic_lr=False, is_group_lr=False, learning_rate=np.array(0.25, dtype=np.float32))
    assert metrics.static_learning_rate(fixed) == 0.25
    assert metrics.static_learning_rate(SimpleNamespace(dynamic_lr=True, learning_rate=0.25)) is None  # a schedule
    assert metrics.static_learning_rate(SimpleNamespace(dynamic_lr=False, is_group_lr=True, learning_rate=0.25)) is None
    assert metrics.static_learning_rate(SimpleNamespace(learning_rate=0.25)) is None  # unknown: maybe a schedule
    assert metrics.static_learning_rate(None) is None


# -- derived values ------------------------------------------------------------------------------------
def test_throughput_of_an_average_step() -> None:
    # 64 samples of 128 tokens in 0.5 s: 128 samples and 16,384 tokens per second.
    assert metrics.throughput(0.5, 64.0, 128) == {
        metrics.PERF_STEP_TIME_MS: 500.0,
        metrics.PERF_SAMPLES_PER_S: 128.0,
        metrics.PERF_TOKENS_PER_S: 16384.0,
    }
    assert metrics.throughput(0.5, 64.0, None) == {metrics.PERF_STEP_TIME_MS: 500.0, metrics.PERF_SAMPLES_PER_S: 128.0}
    assert metrics.throughput(0.5, None, 128) == {metrics.PERF_STEP_TIME_MS: 500.0}  # batch unknown
    assert metrics.throughput(0.0, 64.0, 128) == {metrics.PERF_STEP_TIME_MS: 0.0}  # no rate from a zero time


def test_x_axis_twins_are_made_for_loss_and_lr_only() -> None:
    values = {LOSS: 2.0, LR: 0.25, GRAD: 1.0}
    assert metrics.x_axis_variants(values, metrics.VS_TOKENS_SUFFIX) == {
        "train/loss_vs_tokens": 2.0,
        "train/lr_vs_tokens": 0.25,
    }
    assert metrics.x_axis_variants({GRAD: 1.0}, metrics.VS_SAMPLES_SUFFIX) == {}


def test_norms_accumulate_in_float64() -> None:
    # 300 squared is 90,000, beyond float16's largest value (65,504): in float16 it would be inf.
    assert metrics.squared_norm(np.array([300.0], dtype=np.float16)) == 90000.0
    # 3-4-12-13: sqrt(9 + 16 + 144) over arrays of different shapes and types.
    parts = [np.array([3.0, 4.0], dtype=np.float16), np.array([[12.0]], dtype=np.float32)]
    assert metrics.global_norm(parts) == 13.0
    assert metrics.global_norm([]) == 0.0
    assert math.isinf(metrics.global_norm([np.array([np.inf])]))


# -- tags and kinds ------------------------------------------------------------------------------------
def test_builtin_tags_are_the_monitors_own_and_their_families() -> None:
    builtin = [
        "train/loss",
        "train/loss_aux",
        "perf/mfu",
        "system/device_mem_peak_gb",
        "meta/status",
        "grad_norm/total",
        "train/loss_vs_samples",
        "train/lr_vs_tokens",
        "eval/accuracy",
        "grad_norm/layers.3",
        "param_norm/embedding",
        "moe/layers.1/min_load",
        "ranks/matrix",
        "local/train/loss",
        "alerts/spike",
    ]
    assert [tag for tag in builtin if not metrics.is_builtin_tag(tag)] == []
    # Tags of extra_metrics / log_scalars, including look-alikes of built-in ones.
    custom = ["user/step_x2", "train/grad_norm_vs_samples", "train/custom", "perf", "moe"]
    assert [tag for tag in custom if metrics.is_builtin_tag(tag)] == []


def test_the_builtin_tag_set_holds_no_family_prefix() -> None:
    assert not [tag for tag in metrics.BUILTIN_TAGS if tag.endswith("/")]
    assert {metrics.TRAIN_LOSS, metrics.PERF_MFU, metrics.META_RESTART, metrics.GRAD_NORM_TOTAL} <= metrics.BUILTIN_TAGS


def test_step_metrics_group_values_by_kind_each_step_its_own() -> None:
    step = StepMetrics(3, data={LOSS: 2.0}, model={LR: 0.5}, system={metrics.PERF_STEP_TIME_MS: 100.0})
    assert step.by_kind(MetricKind.DATA) is step.data and step.by_kind(MetricKind.SYSTEM) is step.system
    assert step.merged() == {LOSS: 2.0, LR: 0.5, metrics.PERF_STEP_TIME_MS: 100.0}
    first, second = StepMetrics(1), StepMetrics(2)
    first.data[LOSS] = 1.0
    assert second.data == {}  # no dict shared between steps
    assert (first.grad_squares, first.expert_load) == (None, None)


def test_every_tag_the_code_names_is_in_the_docs() -> None:
    """Each tag and tag prefix of pipeline/metrics.py appears in README.md or docs/ as code (`tag...`)."""
    from conftest import documentation

    text = documentation()
    tags = [value for name, value in vars(metrics).items() if name.isupper() and isinstance(value, str)]
    undocumented = [tag for tag in tags if "/" in tag and f"`{tag}" not in text]
    assert len(tags) > 40 and not undocumented
