"""The collapse rules (alerts/collapse_rules.py): loss_scale_collapse (overflows counted over a sliding
window of points, NaN counting as one; the loss scale under its floor) and expert_collapse (dead experts
or the worst layer's MaxVio out of bounds for consecutive reads of the routers, each tag counted on
its own), with the messages they fire."""

from __future__ import annotations

import math

from mindformers_tbplugin.alerts.collapse_rules import ExpertCollapseRule, LossScaleCollapseRule
from mindformers_tbplugin.alerts.engine import AlertEngine, parse_rules
from mindformers_tbplugin.alerts.record import Alert

SCALE, OVERFLOW = "train/loss_scale", "train/overflow"
DEAD, MAXVIO = "moe/dead_experts", "moe/max_violation"


def run_engine(rules: list[dict], series: list[dict[str, float]]) -> list[Alert]:
    """The rules configured as AlertMonitor's ``rules:`` over one dict of values per step, from step 1."""
    engine = AlertEngine(parse_rules(rules))
    fired = []
    for step, values in enumerate(series, start=1):
        fired += engine.observe(step, values)
    return fired


def fired_steps(rule: LossScaleCollapseRule | ExpertCollapseRule, tag: str, values: list[float]) -> list[int]:
    """The steps (from 1) at which ``rule`` fires on ``values`` of ``tag``."""
    return [step for step, value in enumerate(values, start=1) if rule.update(tag, step, value) is not None]


# -- loss_scale_collapse ---------------------------------------------------------------------------------
def test_loss_scale_collapse_on_repeated_overflow_and_small_scale() -> None:
    series = [{OVERFLOW: 0.0, SCALE: 1024.0} for _ in range(200)]
    for step in range(50, 55):  # five overflows in a row
        series[step - 1][OVERFLOW] = 1.0
    for step in range(150, 200):
        series[step - 1][SCALE] = 2.0 ** (-(step - 150))
    fired = run_engine([{"rule": "loss_scale_collapse"}], series)
    assert [(a.tag, a.step) for a in fired] == [(OVERFLOW, 54), (SCALE, 151)]


def test_overflows_that_left_the_window_no_longer_count() -> None:
    rule = LossScaleCollapseRule(max_overflows=3, window=5)
    overflows = [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    # At step 6 the window holds steps 2-6 (two overflows); the third in the window is at step 8.
    assert fired_steps(rule, OVERFLOW, overflows) == [8]


def test_the_alert_counts_the_overflows_in_the_window() -> None:
    rule = LossScaleCollapseRule(max_overflows=3, window=5)
    for step, value in enumerate([1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0], start=1):
        assert rule.update(OVERFLOW, step, value) is None
    alert = rule.update(OVERFLOW, 8, 1.0)
    assert alert == Alert(
        "loss_scale_collapse", OVERFLOW, 8, 3.0, 3.0, "3 overflowed steps among the last 5 (at step 8)", "critical"
    )


def test_a_nan_overflow_flag_counts_as_an_overflow() -> None:
    assert fired_steps(LossScaleCollapseRule(max_overflows=2), OVERFLOW, [math.nan, math.nan]) == [2]


def test_only_an_overflowed_step_fires_even_with_the_window_full_of_overflows() -> None:
    rule = LossScaleCollapseRule(max_overflows=2, window=10, cooldown=0)
    # Steps 2 and 4 overflow with two or more in the window; step 3, a clean step, does not fire.
    assert fired_steps(rule, OVERFLOW, [1.0, 1.0, 0.0, 1.0]) == [2, 4]


def test_a_loss_scale_under_the_floor_fires_at_once_and_at_the_floor_does_not() -> None:
    rule = LossScaleCollapseRule(min_scale=1.0)
    assert rule.update(SCALE, 2, 1.0) is None  # not below 1
    alert = rule.update(SCALE, 3, 0.5)
    assert (alert.value, alert.baseline) == (0.5, 1.0)
    assert alert.message == "loss scale train/loss_scale fell to 0.5 at step 3 (below 1)"


def test_the_rule_watches_the_tags_it_is_given() -> None:
    rule = LossScaleCollapseRule(overflow_tag="custom/overflow", scale_tag="custom/scale", max_overflows=1)
    assert rule.tags() == ("custom/overflow", "custom/scale")
    assert rule.update("custom/scale", 1, 0.25).message.startswith("loss scale custom/scale fell to 0.25")
    assert rule.update("custom/overflow", 1, 1.0) is not None  # each tag has its own cooldown


# -- expert_collapse ---------------------------------------------------------------------------------------
def test_dead_experts_fire_after_for_reads_consecutive_reads() -> None:
    rule = ExpertCollapseRule(dead_experts=1, for_reads=3)
    # A read without dead experts (step 3) starts the count again: steps 4, 5, 6 are the three.
    assert fired_steps(rule, DEAD, [1.0, 2.0, 0.0, 1.0, 1.0, 1.0]) == [6]


def test_the_alert_says_how_many_dead_experts_for_how_many_reads() -> None:
    rule = ExpertCollapseRule(dead_experts=2, for_reads=2, cooldown=0)
    assert rule.update(DEAD, 10, 2.0) is None
    alert = rule.update(DEAD, 20, 3.0)
    assert (alert.rule, alert.tag, alert.value, alert.baseline, alert.severity) == (
        "expert_collapse",
        DEAD,
        3.0,
        2.0,
        "warning",
    )
    assert alert.message == "routing collapse at step 20: 3 dead expert(s) for 2 consecutive reads"
    # Still collapsed at the next read (no cooldown): the count goes on.
    assert rule.update(DEAD, 30, 3.0).message.endswith("for 3 consecutive reads")


def test_maxvio_is_not_checked_without_a_bound() -> None:
    rule = ExpertCollapseRule(for_reads=1)
    assert rule.tags() == (DEAD, MAXVIO)
    assert fired_steps(rule, MAXVIO, [100.0, 100.0]) == []


def test_maxvio_fires_only_strictly_above_its_bound() -> None:
    rule = ExpertCollapseRule(max_violation=0.5, for_reads=2)
    assert fired_steps(rule, MAXVIO, [0.5, 0.5, 0.5]) == []  # at the bound: in bounds
    assert rule.update(MAXVIO, 4, 0.75) is None  # the first read above
    alert = rule.update(MAXVIO, 5, 0.75)
    assert (
        alert.message == "routing collapse at step 5: the worst layer's MaxVio 0.75 (bound 0.5) for 2 consecutive reads"
    )


def test_dead_experts_and_maxvio_count_their_reads_apart() -> None:
    rule = ExpertCollapseRule(dead_experts=1, max_violation=1.0, for_reads=2)
    # Read 1: dead experts only; read 2: MaxVio only; read 3: both. Each tag's second read is read 3.
    assert rule.update(DEAD, 1, 1.0) is None and rule.update(MAXVIO, 1, 0.5) is None
    assert rule.update(DEAD, 2, 0.0) is None and rule.update(MAXVIO, 2, 2.0) is None
    assert rule.update(DEAD, 3, 1.0) is None  # its run restarted at read 2
    assert rule.update(MAXVIO, 3, 2.0) is not None
