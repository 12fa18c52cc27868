"""baseline_divergence (alerts/divergence_rule.py) through the alerts engine, as AlertMonitor and `mftb
watch` feed it: the window's mean errors against MindFormers' migration standard (the loss fails only
when both its means are over, the grad norm on its relative mean), the first divergent step it names,
and the incident that carries it."""

from __future__ import annotations

import pytest

from mindformers_tbplugin.alerts.culprits import GradientCulprits
from mindformers_tbplugin.alerts.engine import DEFAULT_RULES, AlertEngine, parse_rules
from mindformers_tbplugin.alerts.incident import IncidentRecorder, markdown
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.run import Run

LOSS_ABS, LOSS_REL = metrics.COMPARE_LOSS_ABS_ERR, metrics.COMPARE_LOSS_REL_ERR
GRAD_ABS, GRAD_REL = metrics.COMPARE_GRAD_NORM_ABS_ERR, metrics.COMPARE_GRAD_NORM_REL_ERR
RULE = {"rule": "baseline_divergence", "window": 4, "min_points": 4}


def _loss_errors(run: list[float], base: list[float]) -> list[dict[str, float]]:
    return [{LOSS_ABS: abs(r - b), LOSS_REL: abs(r - b) / abs(b)} for r, b in zip(run, base, strict=True)]


def run_engine(series: list[dict[str, float]], rule: dict = RULE) -> list[Alert]:
    engine = AlertEngine(parse_rules([rule]))
    return [alert for step, values in enumerate(series, start=1) for alert in engine.observe(step, values)]


def test_a_loss_inside_the_standard_never_fires() -> None:
    base = [5.0 - 0.1 * step for step in range(40)]
    run = [value + 0.004 for value in base]  # under 0.005 absolute: never divergent, mean under 0.01
    assert run_engine(_loss_errors(run, base)) == []


def test_either_mean_under_its_tolerance_passes_the_loss() -> None:
    """The standard: mean absolute error < 0.01 OR mean relative error < 1%."""
    high = [100.0] * 20
    off = [value + 0.5 for value in high]  # 0.5 absolute (> 0.01) but 0.5% relative (< 1%)
    assert run_engine(_loss_errors(off, high)) == []
    low = [0.1] * 20
    off = [value + 0.005 for value in low]  # 5% relative (> 1%) but 0.005 absolute (< 0.01)
    assert run_engine(_loss_errors(off, low)) == []


def test_the_alert_names_the_windows_first_divergent_step() -> None:
    base = [5.0] * 30
    run = [5.0 + (0.2 if step >= 12 else 0.001) for step in range(1, 31)]  # divergent from step 12
    (alert,) = run_engine(_loss_errors(run, base), {**RULE, "cooldown": 1000})
    # The window of 4: at step 12 its mean absolute error is (3 x 0.001 + 0.2) / 4 = 0.05075 > 0.01 and
    # its mean relative error 1.015% > 1%: it fires at once.
    assert (alert.step, alert.tag) == (12, LOSS_REL)
    assert alert.value == pytest.approx((3 * 0.001 + 0.2) / 4 / 5.0)
    assert alert.baseline == 0.01
    assert alert.incident == {
        "compared": metrics.TRAIN_LOSS,
        "first_divergent_step": 12,
        "window_steps": 4,
        "window_mean_abs_err": pytest.approx((3 * 0.001 + 0.2) / 4),
        "window_mean_rel_err": pytest.approx((3 * 0.001 + 0.2) / 4 / 5.0),
    }
    assert "first divergent step 12" in alert.message


def test_the_grad_norm_fails_on_its_mean_relative_error_alone() -> None:
    series = [{GRAD_ABS: 0.001, GRAD_REL: 0.15 if step >= 6 else 0.01} for step in range(1, 20)]
    alerts = run_engine(series)
    # Steps 4-7: (2 x 0.01 + 2 x 0.15) / 4 = 8%, within 10%; steps 5-8: 11.5%.
    assert [(alert.step, alert.tag) for alert in alerts] == [(8, GRAD_REL)]
    assert alerts[0].incident["first_divergent_step"] == 6
    assert run_engine(series, {**RULE, "quantity": "loss"}) == []


def test_mftb_watch_feeds_one_point_at_a_time_in_either_order() -> None:
    base = [5.0] * 12
    run = [5.0 + (0.2 if step >= 5 else 0.0) for step in range(1, 13)]
    for order in ((LOSS_ABS, LOSS_REL), (LOSS_REL, LOSS_ABS)):
        engine = AlertEngine(parse_rules([RULE]))
        alerts = [
            alert
            for step, values in enumerate(_loss_errors(run, base), start=1)
            for tag in order
            for alert in engine.observe_point(tag, step, values[tag])
        ]
        assert [(alert.step, alert.incident["first_divergent_step"]) for alert in alerts] == [(5, 5)]


def test_the_incident_carries_the_rules_facts() -> None:
    base = [5.0] * 10
    run = [5.0 + (0.3 if step >= 3 else 0.0) for step in range(1, 11)]
    (alert,) = run_engine(_loss_errors(run, base), {**RULE, "min_points": 1, "window": 2})
    recorder = IncidentRecorder(Run(), GradientCulprits())
    recorder.remember(alert.step, {metrics.TRAIN_LOSS: run[alert.step - 1], metrics.TRAIN_LR: 1e-4})
    attached = recorder.attach(alert)
    assert attached.incident["first_divergent_step"] == 3
    assert attached.incident["lr"] == 1e-4 and attached.incident["step"] == alert.step
    assert "- first divergent step: 3 (train/loss)" in markdown(attached)


def test_its_defaults_are_the_migration_standard_of_the_criteria() -> None:
    from mindformers_tbplugin.alignment.criteria import MINDFORMERS
    from mindformers_tbplugin.schema import params_of

    defaults = {param.name: param.default for param in params_of(parse_rules([RULE])[0].__class__)}
    loss, grad_norm = MINDFORMERS.tags[metrics.TRAIN_LOSS], MINDFORMERS.tags[metrics.TRAIN_GRAD_NORM]
    assert (
        (defaults["loss_mean_abs_tol"], defaults["loss_mean_rel_tol"])
        == (0.01, 0.01)
        == (
            loss.mean.abs_lt,
            loss.mean.rel_lt,
        )
    )
    assert (
        (defaults["loss_step_abs_tol"], defaults["loss_step_rel_tol"])
        == (0.005, 0.005)
        == (
            loss.first_step.abs_lt,
            loss.first_step.rel_lt,
        )
    )
    assert defaults["grad_norm_mean_rel_tol"] == 0.1 == grad_norm.mean.rel_le


def test_the_default_rules_judge_a_run_with_a_baseline() -> None:
    """AlertMonitor and `mftb watch` without rules: a run that leaves its baseline is said at the default
    window's min_points (20) compared steps; a run with no baseline (no compare/* tags) is not judged."""
    engine = AlertEngine(parse_rules(list(DEFAULT_RULES)))
    base = [5.0] * 30
    errors = _loss_errors([value + 0.2 for value in base], base)  # 0.2 absolute, 4% relative: both over
    alerts = [alert for step, values in enumerate(errors, start=1) for alert in engine.observe(step, values)]
    assert [(alert.rule, alert.step, alert.tag) for alert in alerts] == [("baseline_divergence", 20, LOSS_REL)]
    assert alerts[0].incident["first_divergent_step"] == 1
    plain = AlertEngine(parse_rules(list(DEFAULT_RULES)))
    assert [alert for step in range(1, 31) for alert in plain.observe(step, {metrics.TRAIN_LOSS: 5.0})] == []
