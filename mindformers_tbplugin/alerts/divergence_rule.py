"""The rule on a run leaving its baseline (TensorBoardMonitor's ``baseline``), over the ``compare/*``
errors it writes. Same contract as :mod:`mindformers_tbplugin.alerts.rules`.

Its defaults are MindFormers' acceptance standard for a migrated model (alignment/criteria.py's
``mindformers``, with its source): the loss's mean absolute error under 0.01 or its mean relative error under 1%, the
grad norm's mean relative error at most 10%; a step whose loss is off by more than the first step's
tolerance (0.005 absolute and 0.5% relative) counts as divergent. The means are taken over the last
``window`` compared steps, so an alert comes while the run trains, not after 5,000 steps.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import Annotated, Any, Literal

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.rules import Rule, number_text
from mindformers_tbplugin.alignment.criteria import MINDFORMERS, Bounds
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.schema import Range

QUANTITIES = {"loss": ("loss",), "grad_norm": ("grad_norm",), "both": ("loss", "grad_norm")}
_LOSS, _GRAD_NORM = MINDFORMERS.tags[metrics.TRAIN_LOSS], MINDFORMERS.tags[metrics.TRAIN_GRAD_NORM]


class _Window:
    """One quantity's last compared steps: ``(step, abs err, rel err, divergent)`` and their sums."""

    __slots__ = ("first_divergent", "pending", "points", "sums")

    def __init__(self, size: int) -> None:
        self.points: deque[tuple[int, float, float, bool]] = deque(maxlen=size)
        self.sums = [0.0, 0.0]
        self.pending: dict[str, tuple[int, float]] = {}  # one error of a step whose other is not seen yet
        self.first_divergent: int | None = None  # over the whole run

    def add(self, step: int, abs_err: float, rel_err: float, divergent: bool) -> None:
        points, sums = self.points, self.sums
        if len(points) == points.maxlen:
            _, old_abs, old_rel, _ = points[0]
            sums[0] -= old_abs
            sums[1] -= old_rel
        points.append((step, abs_err, rel_err, divergent))
        sums[0] += abs_err
        sums[1] += rel_err
        if divergent and self.first_divergent is None:
            self.first_divergent = step

    def first_divergent_in_window(self) -> int | None:
        return next((step for step, _, _, divergent in self.points if divergent), self.first_divergent)


class BaselineDivergenceRule(Rule):
    """The run leaves its baseline: over the last `window` steps compared with it, the loss's mean
    absolute and relative errors both over their tolerances, or the grad norm's mean relative error
    over its tolerance (TensorBoardMonitor's ``baseline`` writes the errors, ``compare/*``). The alert
    and its incident name the first divergent step: the window's first step whose loss error is over
    the first-step tolerances both absolutely and relatively (the grad norm's: over its tolerance).

    Args:
        quantity: What is compared: loss, grad_norm or both.
        window: Compared steps over which the mean errors are taken.
        min_points: Compared steps needed in the window before the rule can fire.
        loss_mean_abs_tol: The loss's mean absolute error that is still acceptable.
        loss_mean_rel_tol: The loss's mean relative error (a fraction) that is still acceptable.
        loss_step_abs_tol: A step's loss absolute error over this (and over loss_step_rel_tol) is divergent.
        loss_step_rel_tol: A step's loss relative error over this (and over loss_step_abs_tol) is divergent.
        grad_norm_mean_rel_tol: The grad norm's mean relative error (a fraction) that is still
            acceptable; a step over it is divergent.
    """

    name = "baseline_divergence"

    def __init__(
        self,
        quantity: Literal["loss", "grad_norm", "both"] = "both",
        window: Annotated[int, Range(min=1)] = 100,
        min_points: Annotated[int, Range(min=1)] = 20,
        loss_mean_abs_tol: Annotated[float, Range(min=0)] = _LOSS.mean.abs_lt,
        loss_mean_rel_tol: Annotated[float, Range(min=0)] = _LOSS.mean.rel_lt,
        loss_step_abs_tol: Annotated[float, Range(min=0)] = _LOSS.first_step.abs_lt,
        loss_step_rel_tol: Annotated[float, Range(min=0)] = _LOSS.first_step.rel_lt,
        grad_norm_mean_rel_tol: Annotated[float, Range(min=0)] = _GRAD_NORM.mean.rel_le,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.min_points = min_points
        # name -> (the window's mean errors within, a step within): the standard's "abs < a or rel < r"
        self._bounds = {
            "loss": (
                Bounds(abs_lt=loss_mean_abs_tol, rel_lt=loss_mean_rel_tol),
                Bounds(abs_lt=loss_step_abs_tol, rel_lt=loss_step_rel_tol),
            ),
            "grad_norm": (Bounds(rel_le=grad_norm_mean_rel_tol), Bounds(rel_le=grad_norm_mean_rel_tol)),
        }
        # error tag -> (quantity, "abs" | "rel")
        self._of: dict[str, tuple[str, str]] = {}
        for name in QUANTITIES[quantity]:
            _, abs_tag, rel_tag, _, _ = metrics.COMPARED[name]
            self._of[abs_tag], self._of[rel_tag] = (name, "abs"), (name, "rel")
        self._tags = tuple(self._of)
        self._windows = {name: _Window(window) for name in QUANTITIES[quantity]}

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        name, kind = self._of[tag]
        window = self._windows[name]
        other = window.pending.pop("rel" if kind == "abs" else "abs", None)
        if other is None or other[0] != step:  # the step's other error comes next
            window.pending[kind] = (step, value)
            return None
        abs_err, rel_err = (value, other[1]) if kind == "abs" else (other[1], value)
        if not (math.isfinite(abs_err) and math.isfinite(rel_err)):
            return None  # a non-finite loss is the nonfinite rule's; a zero baseline has no relative error
        mean_bounds, step_bounds = self._bounds[name]
        window.add(step, abs_err, rel_err, not step_bounds.holds(abs_err, rel_err))
        if len(window.points) < self.min_points:
            return None
        count = len(window.points)
        mean_abs, mean_rel = window.sums[0] / count, window.sums[1] / count
        if mean_bounds.holds(mean_abs, mean_rel):
            return None
        over = (
            f"mean absolute error {number_text(mean_abs)}, mean relative error {mean_rel:.3%} "
            f"(the criteria: {mean_bounds.describe()})"
        )
        mean_rel_tol = mean_bounds.rel_lt if mean_bounds.rel_lt is not None else mean_bounds.rel_le
        first = window.first_divergent_in_window()
        run_tag = metrics.COMPARED[name][0]
        where = "no single step over the step tolerance" if first is None else f"first divergent step {first}"
        message = f"{run_tag} leaves its baseline at step {step}: over the last {count} compared steps, {over}; {where}"
        alert = self._fire(tag, step, mean_rel, mean_rel_tol, message)
        if alert is None:
            return None
        facts = {
            "compared": run_tag,
            "first_divergent_step": first,
            "window_steps": count,
            "window_mean_abs_err": mean_abs,
            "window_mean_rel_err": mean_rel,
        }
        return replace(alert, incident=facts)  # the incident's own facts (alerts/incident.py adds the rest)
