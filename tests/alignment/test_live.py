"""alignment/live.py: the compare/* values of a run against its baseline, step by step, checked against
errors computed here the long way."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mindformers_tbplugin.alignment.live import LiveComparison
from mindformers_tbplugin.imports.imported_run import ImportedRun
from mindformers_tbplugin.pipeline import metrics


def _baseline(**scalars: dict[int, float]) -> ImportedRun:
    run = ImportedRun(source=[Path("base")], format="test")
    for tag, series in scalars.items():
        run.scalars[tag] = series
    return run


def test_steps_the_baseline_has_get_errors_and_running_means() -> None:
    base = {2: 4.0, 4: 3.0, 5: 2.0}
    comparison = LiveComparison(_baseline(**{metrics.TRAIN_LOSS: base}))
    run = {1: 5.0, 2: 4.1, 3: 3.5, 4: 2.7, 5: 2.0}
    written = {
        step: comparison.observe(step, {metrics.TRAIN_LOSS: value, metrics.TRAIN_LR: 1.0})
        for step, value in run.items()
    }
    assert [step for step, found in written.items() if found] == [2, 4, 5]
    errors = [(abs(run[s] - base[s]), abs(run[s] - base[s]) / base[s]) for s in (2, 4, 5)]
    for index, step in enumerate((2, 4, 5)):
        found = written[step]
        assert found[metrics.COMPARE_LOSS_ABS_ERR] == pytest.approx(errors[index][0])
        assert found[metrics.COMPARE_LOSS_REL_ERR] == pytest.approx(errors[index][1])
        assert found[metrics.COMPARE_LOSS_MEAN_ABS_ERR] == pytest.approx(
            sum(e[0] for e in errors[: index + 1]) / (index + 1)
        )
        assert found[metrics.COMPARE_LOSS_MEAN_REL_ERR] == pytest.approx(
            sum(e[1] for e in errors[: index + 1]) / (index + 1)
        )
    assert comparison.tags == {metrics.TRAIN_LOSS}  # no grad norm in the baseline: none compared


def test_grad_norm_is_compared_where_both_have_it_and_on_its_own_step() -> None:
    comparison = LiveComparison(_baseline(**{metrics.TRAIN_LOSS: {1: 2.0}, metrics.TRAIN_GRAD_NORM: {1: 0.5}}))
    # A multi-rank job writes the grad norm at once and the loss at the next aggregation: two calls.
    found = comparison.observe(1, {metrics.TRAIN_GRAD_NORM: 0.6})
    assert found == pytest.approx(
        {
            metrics.COMPARE_GRAD_NORM_ABS_ERR: 0.1,
            metrics.COMPARE_GRAD_NORM_REL_ERR: 0.2,
            metrics.COMPARE_GRAD_NORM_MEAN_ABS_ERR: 0.1,
            metrics.COMPARE_GRAD_NORM_MEAN_REL_ERR: 0.2,
        }
    )
    assert set(comparison.observe(1, {metrics.TRAIN_LOSS: 2.0})) == {
        metrics.COMPARE_LOSS_ABS_ERR, metrics.COMPARE_LOSS_REL_ERR,
        metrics.COMPARE_LOSS_MEAN_ABS_ERR, metrics.COMPARE_LOSS_MEAN_REL_ERR,
    }  # fmt: skip


@pytest.mark.parametrize("log_every", [1, 2, 3])
def test_a_baseline_of_means_is_compared_with_the_runs_mean_over_the_same_steps(log_every: int) -> None:
    """Megatron-LM's printed loss at step s is the mean over steps s-9..s (--log-interval 10)."""
    base = {10: 5.0, 20: 4.0, 30: 3.0}
    imported = _baseline(**{metrics.TRAIN_LOSS: base})
    imported.averaged_over[metrics.TRAIN_LOSS] = 10
    comparison = LiveComparison(imported)
    run = {step: 6.0 - 0.1 * step for step in range(1, 31)}
    logged = [step for step in run if step % log_every == 0]
    found = {step: comparison.observe(step, {metrics.TRAIN_LOSS: run[step]}) for step in logged}
    compared = [step for step in logged if found[step]]
    assert compared == [step for step in (10, 20, 30) if step % log_every == 0]
    for step in compared:
        window = [run[s] for s in logged if step - 10 < s <= step]
        mean = math.fsum(window) / len(window)
        assert found[step][metrics.COMPARE_LOSS_ABS_ERR] == pytest.approx(abs(mean - base[step]))
        assert found[step][metrics.COMPARE_LOSS_REL_ERR] == pytest.approx(abs(mean - base[step]) / base[step])


def test_a_printed_baselines_rounding_is_no_difference_and_a_zero_baseline_has_no_relative_error() -> None:
    imported = _baseline(**{metrics.TRAIN_GRAD_NORM: {1: 1.234, 2: 1.234, 3: 0.0}})
    imported.resolution[metrics.TRAIN_GRAD_NORM] = 0.001  # printed with 3 decimals: known to +-0.0005
    comparison = LiveComparison(imported)
    within = comparison.observe(1, {metrics.TRAIN_GRAD_NORM: 1.2344})
    assert within[metrics.COMPARE_GRAD_NORM_ABS_ERR] == 0.0 and within[metrics.COMPARE_GRAD_NORM_REL_ERR] == 0.0
    beyond = comparison.observe(2, {metrics.TRAIN_GRAD_NORM: 1.2356})
    assert beyond[metrics.COMPARE_GRAD_NORM_ABS_ERR] == pytest.approx(0.0016)
    zero = comparison.observe(3, {metrics.TRAIN_GRAD_NORM: 0.1})
    assert math.isnan(zero[metrics.COMPARE_GRAD_NORM_REL_ERR])
    assert zero[metrics.COMPARE_GRAD_NORM_MEAN_REL_ERR] == pytest.approx(0.0016 / 1.234 / 2)  # steps 1 and 2 only
    assert zero[metrics.COMPARE_GRAD_NORM_MEAN_ABS_ERR] == pytest.approx((0.0016 + 0.1) / 3)
