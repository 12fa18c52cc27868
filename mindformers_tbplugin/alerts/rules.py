"""The alert rules. Each sees the points of its tags one at a time (``update``) and keeps only rolling
windows, so memory does not grow with the number of points.

A rule declares each parameter once, as a keyword argument of its ``__init__``: type hint, range or
choices, default, and a line in the class docstring's ``Args:``. :mod:`mindformers_tbplugin.schema`
derives validation and the ``mftb watch --list-rules`` text from that, as it does for the callbacks.
The parameters every rule has (``action``, ``severity``, ``cooldown``) are :class:`Rule`'s, reached
through ``**common``.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.statistics import RollingWindow
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.schema import Kind, Problem, Range

STALL_TAG = "*"  # stall alerts concern a whole run, not one tag


def _is_tags(value: Any) -> bool:
    return (isinstance(value, str) and bool(value)) or (
        isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)
    )


# The type of a ``tag`` parameter: one tag or a non-empty list of tags.
Tags = Annotated[str | Sequence[str], Kind("tag or list of tags", _is_tags)]


def as_tags(tag: str | Sequence[str]) -> tuple[str, ...]:
    """A ``tag`` parameter as the tuple of tags the engine routes to the rule."""
    return (tag,) if isinstance(tag, str) else tuple(tag)


def number_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


class Rule(abc.ABC):
    """The parameters every rule has, the per-tag cooldown, and the alert factory.

    Args:
        action: warn: only report; stop: also end training at the end of the step.
        severity: info, warning or critical (default: per rule).
        cooldown: Steps after an alert during which the same rule and tag stay quiet.
    """

    name: ClassVar[str]
    default_severity: ClassVar[str] = "warning"
    watcher_only: ClassVar[bool] = False

    def __init__(
        self,
        action: Literal["warn", "stop"] = "warn",
        severity: Literal["info", "warning", "critical"] | None = None,
        cooldown: Annotated[int, Range(min=0)] = 100,
    ) -> None:
        self.action = action
        self.severity = severity or self.default_severity
        self.cooldown = cooldown
        self._tags: tuple[str, ...] = ()
        self._last_fired: dict[str, int] = {}

    def tags(self) -> tuple[str, ...]:
        """The tags whose points :meth:`update` takes."""
        return self._tags

    @abc.abstractmethod
    def update(self, tag: str, step: int, value: float) -> Alert | None:
        """Take one point of ``tag``; return an alert when the rule fires (and is not cooling down)."""

    def _fire(self, tag: str, step: int, value: float, baseline: float | None, message: str) -> Alert | None:
        last = self._last_fired.get(tag)
        if last is not None and last <= step < last + self.cooldown:
            return None
        self._last_fired[tag] = step
        return Alert(self.name, tag, step, value, baseline, message, self.severity, self.action)


class NonFiniteRule(Rule):
    """A value is NaN or infinite.

    Args:
        tag: Tag(s) to check.
    """

    name = "nonfinite"
    default_severity = "critical"

    def __init__(self, tag: Tags = (metrics.TRAIN_LOSS, metrics.TRAIN_GRAD_NORM), **common: Any) -> None:
        super().__init__(**common)
        self._tags = as_tags(tag)

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if math.isfinite(value):
            return None
        return self._fire(tag, step, value, None, f"{tag} is {value} at step {step}")


class SpikeRule(Rule):
    """A value jumps above median + k * MAD of the previous `window` points.

    Args:
        tag: Tag(s) to check.
        k: How many MADs above the rolling median counts as a spike.
        window: Rolling window (points) for the median and MAD.
        min_points: Points needed in the window before the rule can fire.
        min_rel_scale: Floor of the MAD as a fraction of |median|, so a flat series is not all spikes.
    """

    name = "spike"

    def __init__(
        self,
        tag: Tags = (metrics.TRAIN_LOSS, metrics.TRAIN_GRAD_NORM),
        k: Annotated[float, Range(min=0)] = 8.0,
        window: Annotated[int, Range(min=3)] = 100,
        min_points: Annotated[int, Range(min=3)] = 50,
        min_rel_scale: Annotated[float, Range(min=0)] = 0.01,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._tags = as_tags(tag)
        self.k = k
        self.min_points = min_points
        self.min_rel_scale = min_rel_scale
        self._windows = {tag: RollingWindow(window) for tag in self._tags}

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if not math.isfinite(value):
            return None
        window = self._windows[tag]
        alert = None
        if len(window) >= self.min_points:
            median = window.median()
            floor = max(self.min_rel_scale * abs(median), 1e-12)
            # The MAD only matters above median + k * floor: most points skip computing it.
            scale = max(window.mad(median), floor) if value > median + self.k * floor else floor
            bound = median + self.k * scale
            if value > bound:
                message = (
                    f"{tag} spiked to {number_text(value)} at step {step} (rolling median {number_text(median)}, "
                    f"bound median + {self.k:g} MAD = {number_text(bound)})"
                )
                alert = self._fire(tag, step, value, median, message)
        window.add(value)
        return alert


class PlateauRule(Rule):
    """No improvement of at least `min_delta` for `patience` steps.

    Args:
        tag: Tag(s) to check.
        min_delta: Smallest change that counts as an improvement.
        patience: Steps without improvement before the rule fires.
        mode: min: lower is better (loss); max: higher is better.
    """

    name = "plateau"

    def __init__(
        self,
        tag: Tags = (metrics.TRAIN_LOSS,),
        min_delta: Annotated[float, Range(min=0)] = 0.0,
        patience: Annotated[int, Range(min=1)] = 500,
        mode: Literal["min", "max"] = "min",
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._tags = as_tags(tag)
        self.min_delta = min_delta
        self.patience = patience
        self.sign = 1.0 if mode == "min" else -1.0
        self._best: dict[str, tuple[float, int]] = {}

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if not math.isfinite(value):
            return None
        best = self._best.get(tag)
        if best is None or step < best[1] or self.sign * (best[0] - value) > self.min_delta:
            self._best[tag] = (value, step)
            return None
        if step - best[1] < self.patience:
            return None
        self._best[tag] = (best[0], step)  # count the next patience from here
        message = (
            f"{tag} has not improved by more than {self.min_delta:g} for {step - best[1]} steps "
            f"(best {number_text(best[0])} at step {best[1]}, now {number_text(value)})"
        )
        return self._fire(tag, step, value, best[0], message)


class ThresholdRule(Rule):
    """A value above `above` or below `below` for `for_steps` consecutive points.

    Args:
        tag: Tag(s) to check (required).
        above: Fire when the value is greater than this.
        below: Fire when the value is less than this.
        for_steps: Consecutive points out of bounds needed to fire.
    """

    name = "threshold"

    def __init__(
        self,
        tag: Tags,
        above: float | None = None,
        below: float | None = None,
        for_steps: Annotated[int, Range(min=1)] = 1,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._tags = as_tags(tag)
        self.above = above
        self.below = below
        self.for_steps = for_steps
        self._run: dict[str, int] = dict.fromkeys(self._tags, 0)

    @classmethod
    def check_cross_fields(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        """The tag is required, and at least one bound."""
        problems = []
        if arguments.get("tag") is None:
            problems.append(Problem("tag", "required: the tag to compare, e.g. train/grad_norm"))
        if arguments.get("above") is None and arguments.get("below") is None:
            problems.append(Problem("above", "give 'above', 'below' or both"))
        return problems

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if self.above is not None and value > self.above:
            side, bound = "above", self.above
        elif self.below is not None and value < self.below:
            side, bound = "below", self.below
        else:
            self._run[tag] = 0
            return None
        self._run[tag] += 1
        if self._run[tag] < self.for_steps:
            return None
        message = f"{tag} = {number_text(value)} at step {step}, {side} {number_text(bound)}"
        return self._fire(tag, step, value, bound, message)


class ThroughputDropRule(Rule):
    """Throughput below (1 - ratio) x its rolling median for `for_steps` consecutive points.

    Args:
        tag: Tag(s) to check (e.g. perf/samples_per_s).
        ratio: Relative drop that counts: 0.3 fires below 70% of the median.
        window: Rolling window (points) for the median.
        for_steps: Consecutive low points needed to fire.
        min_points: Points needed in the window before the rule can fire.
    """

    name = "throughput_drop"

    def __init__(
        self,
        tag: Tags = (metrics.PERF_TOKENS_PER_S,),
        ratio: Annotated[float, Range(min=0, max=1)] = 0.3,
        window: Annotated[int, Range(min=3)] = 50,
        for_steps: Annotated[int, Range(min=1)] = 3,
        min_points: Annotated[int, Range(min=1)] = 10,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._tags = as_tags(tag)
        self.keep = 1.0 - ratio
        self.for_steps = for_steps
        self.min_points = min_points
        self._windows = {tag: RollingWindow(window) for tag in self._tags}
        self._low: dict[str, int] = dict.fromkeys(self._tags, 0)

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if not math.isfinite(value):
            return None
        window = self._windows[tag]
        alert = None
        if len(window) >= self.min_points:
            median = window.median()
            if value < self.keep * median:
                self._low[tag] += 1
                if self._low[tag] >= self.for_steps:
                    message = (
                        f"{tag} = {number_text(value)} at step {step}: below {self.keep:.0%} of its rolling median "
                        f"{number_text(median)} for {self._low[tag]} points"
                    )
                    alert = self._fire(tag, step, value, median, message)
            else:
                self._low[tag] = 0
        window.add(value)
        return alert


class StallRule(Rule):
    """No new step for k x the median step interval (mftb watch only).

    Evaluated against the clock by ``mftb watch``: see :meth:`AlertEngine.check_stall`.

    Args:
        k: Multiple of the median interval between steps that counts as a stall.
        window: Intervals in the rolling median.
        min_silence: Seconds of silence always tolerated, however fast the steps.
        give_up_after: Seconds after which a silent run counts as finished, not stalled; 0: never.
    """

    name = "stall"
    default_severity = "critical"
    watcher_only = True

    def __init__(
        self,
        k: Annotated[float, Range(min=1)] = 10.0,
        window: Annotated[int, Range(min=2)] = 50,
        min_silence: Annotated[float, Range(min=0)] = 300.0,
        give_up_after: Annotated[float, Range(min=0)] = 86400.0,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.k = k
        self.min_silence = min_silence
        self.give_up_after = give_up_after
        self._intervals = RollingWindow(window)
        self._last_step: int | None = None
        self._last_wall: float | None = None
        self._fired = False

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        return None

    def progress(self, step: int, wall_time: float) -> None:
        """A point was read: a larger step than before is progress."""
        if self._last_step is not None and step <= self._last_step:
            return
        if self._last_wall is not None and wall_time > self._last_wall:
            self._intervals.add(wall_time - self._last_wall)
        self._last_step, self._last_wall, self._fired = step, wall_time, False

    def check(self, now: float) -> Alert | None:
        if self._fired or self._last_wall is None or len(self._intervals) < 2:
            return None
        silence = now - self._last_wall
        median = self._intervals.median()
        if silence <= max(self.k * median, self.min_silence):
            return None
        if self.give_up_after and silence > self.give_up_after:
            return None
        self._fired = True
        message = (
            f"no new step for {silence:.0f} s after step {self._last_step} "
            f"(median step interval {median:.3g} s, limit {self.k:g}x)"
        )
        return Alert(self.name, STALL_TAG, self._last_step, silence, median, message, self.severity, self.action)
