"""The gradient groups an alert on a gradient norm names (alerts/culprits.py): which tags are gradient
norms and which of a step's values are group norms; the groups ranked non-finite first, then by their
norm over their own recent median (needing a few finite points of history, over a bounded window), then,
without history, by the norm itself; three at most, appended to the alert's message."""

from __future__ import annotations

import math

from mindformers_tbplugin.alerts.culprits import HISTORY, GradientCulprits, gradient_groups, is_gradient_tag
from mindformers_tbplugin.alerts.record import Alert

PREFIX = "largest gradient norms against their recent median: "


def _alert(step: int, tag: str = "train/grad_norm") -> Alert:
    return Alert("spike", tag, step, 9.0, 1.0, "train/grad_norm 9 is 9x its median", "warning")


def test_culprits_are_ranked_by_their_own_median_not_by_size() -> None:
    culprits = GradientCulprits()
    for _ in range(5):
        culprits.remember({"grad_norm/embedding": 1.0, "grad_norm/layers.0": 0.1, "grad_norm/layers.1": 0.01})
    values = {"grad_norm/embedding": 1.1, "grad_norm/layers.0": 0.1, "grad_norm/layers.1": 0.5, "grad_norm/total": 1.2}
    message = culprits.annotate(_alert(6), values).message
    assert message.endswith(
        "largest gradient norms against their recent median: layers.1 0.5 (50x its median), "
        "embedding 1.1 (1.1x its median), layers.0 0.1 (1x its median)"
    )
    nonfinite = culprits.annotate(_alert(7), {**values, "grad_norm/layers.0": math.nan}).message
    assert "median: layers.0 nan, layers.1 0.5" in nonfinite
    assert culprits.annotate(_alert(8, "train/loss"), values).message == _alert(8).message


def test_gradient_tags_are_the_global_norm_and_the_per_group_norms() -> None:
    assert is_gradient_tag("train/grad_norm") and is_gradient_tag("grad_norm/layers.0")
    assert is_gradient_tag("grad_norm/total")
    assert not is_gradient_tag("train/loss") and not is_gradient_tag("param_norm/layers.0")


def test_group_norms_are_the_per_group_tags_without_the_total() -> None:
    values = {"grad_norm/total": 5.0, "grad_norm/layers.0": 1.0, "train/loss": 2.0, "param_norm/layers.0": 3.0}
    assert gradient_groups(values) == {"layers.0": 1.0}


def test_without_enough_history_groups_are_ranked_by_their_norm() -> None:
    culprits = GradientCulprits()
    for _ in range(2):  # two steps: one short of a median
        culprits.remember({"grad_norm/a": 1.0, "grad_norm/b": 1.0})
    assert culprits.describe({"a": 1.0, "b": 3.0}) == PREFIX + "b 3, a 1"


def test_a_group_measured_against_its_median_outranks_one_without_history() -> None:
    culprits = GradientCulprits()
    for _ in range(3):
        culprits.remember({"grad_norm/layers.0": 1.0})
    # layers.9 is new (no history): however large its norm, it follows the groups with a ratio.
    assert culprits.describe({"layers.0": 0.5, "layers.9": 100.0}) == (
        PREFIX + "layers.0 0.5 (0.5x its median), layers.9 100"
    )


def test_only_the_three_groups_that_stand_out_most_are_named() -> None:
    culprits = GradientCulprits()
    for _ in range(3):
        culprits.remember({f"grad_norm/layers.{index}": 1.0 for index in range(4)})
    groups = {"layers.0": 2.0, "layers.1": 5.0, "layers.2": 3.0, "layers.3": 4.0}
    assert culprits.describe(groups) == (
        PREFIX + "layers.1 5 (5x its median), layers.3 4 (4x its median), layers.2 3 (3x its median)"
    )


def test_the_median_is_over_the_last_steps_only() -> None:
    culprits = GradientCulprits()
    for _ in range(HISTORY):
        culprits.remember({"grad_norm/a": 1.0})
    for _ in range(11):
        culprits.remember({"grad_norm/a": 4.0})
    # Kept: the last 20 steps, 9 x 1 and 11 x 4: median 4. Over all 31 steps it would be 1.
    assert culprits.describe({"a": 8.0}) == PREFIX + "a 8 (2x its median)"


def test_non_finite_points_are_left_out_of_the_history() -> None:
    culprits = GradientCulprits()
    for value in (math.nan, 2.0, 2.0):
        culprits.remember({"grad_norm/a": value})
    assert culprits.describe({"a": 4.0}) == PREFIX + "a 4"  # two finite points: no median yet
    culprits.remember({"grad_norm/a": 2.0})
    assert culprits.describe({"a": 4.0}) == PREFIX + "a 4 (2x its median)"


def test_a_group_whose_median_is_zero_has_no_ratio() -> None:
    culprits = GradientCulprits()
    for _ in range(3):
        culprits.remember({"grad_norm/frozen": 0.0})  # e.g. a frozen layer
    assert culprits.describe({"frozen": 0.5}) == PREFIX + "frozen 0.5"


def test_an_alert_on_a_group_norm_is_annotated_and_one_without_group_norms_is_not() -> None:
    culprits = GradientCulprits()
    alert = _alert(3, "grad_norm/layers.1")
    annotated = culprits.annotate(alert, {"grad_norm/layers.1": 9.0, "grad_norm/total": 9.0})
    assert annotated.message == alert.message + "; " + PREFIX + "layers.1 9"
    assert culprits.annotate(_alert(3), {"grad_norm/total": 9.0, "train/grad_norm": 9.0}) == _alert(3)
