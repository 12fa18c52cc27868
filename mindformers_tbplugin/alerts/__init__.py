"""Alert rules over training scalars: one pure-Python engine for AlertMonitor and ``mftb watch``.

A rule watches one or more tags and sees their points one at a time (``update``); it keeps only
rolling windows, so memory does not grow with the number of points. Rules are configured with a
YAML-style list such as ``[{rule: spike, tag: train/loss, k: 6}, {rule: nonfinite, action: stop}]``,
parsed by :func:`build_rules`, which reports every problem at once. No MindSpore import here.
"""

from __future__ import annotations

import abc
import difflib
import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

from mindformers_tbplugin.config.schema import ConfigError, Problem
from mindformers_tbplugin.pipeline import metrics

SEVERITIES = ("info", "warning", "critical")
ACTIONS = ("warn", "stop")
STALL_TAG = "*"  # stall alerts concern a whole run, not one tag


@dataclass(frozen=True)
class Alert:
    """One fired rule. ``baseline`` is what the value was compared against (None when nothing was)."""

    rule: str
    tag: str
    step: int
    value: float
    baseline: float | None
    message: str
    severity: str
    action: str = "warn"
    run: str = ""

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self)
        for key in ("value", "baseline"):  # JSON has no NaN/Inf: spell them as strings
            if isinstance(record[key], float) and not math.isfinite(record[key]):
                record[key] = str(record[key])
        return record


# ---------------------------------------------------------------------------------------------
# Rolling statistics
# ---------------------------------------------------------------------------------------------


class RollingWindow:
    """The last ``size`` values, also kept sorted: median in O(1), MAD in O(log n), add in O(n) memmove."""

    __slots__ = ("_fifo", "_sorted", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, value: float) -> None:
        if len(self._fifo) == self.size:
            oldest = self._fifo.popleft()
            del self._sorted[bisect_left(self._sorted, oldest)]
        self._fifo.append(value)
        insort(self._sorted, value)

    def median(self) -> float:
        s, n = self._sorted, len(self._sorted)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    def mad(self, median: float) -> float:
        """Median absolute deviation from ``median``, without building the list of deviations."""
        n = len(self._sorted)
        if n % 2:
            return self._kth_deviation(median, n // 2)
        return (self._kth_deviation(median, n // 2 - 1) + self._kth_deviation(median, n // 2)) / 2

    def _kth_deviation(self, center: float, k: int) -> float:
        """The k-th smallest |x - center| (0-based): k-th of two sorted sequences, by binary search.

        Left deviations ``center - s[p-1-i]`` and right deviations ``s[p+j] - center`` are both
        ascending; find how many of the k+1 smallest come from the left.
        """
        s = self._sorted
        p = bisect_left(s, center)
        n_left, n_right = p, len(s) - p
        lo, hi = max(0, k + 1 - n_right), min(k + 1, n_left)
        while lo < hi:
            take_left = (lo + hi) // 2
            take_right = k + 1 - take_left
            if center - s[p - 1 - take_left] < s[p + take_right - 1] - center:
                lo = take_left + 1
            else:
                hi = take_left
        take_right = k + 1 - lo
        last_left = center - s[p - lo] if lo > 0 else -math.inf
        last_right = s[p + take_right - 1] - center if take_right > 0 else -math.inf
        return max(last_left, last_right)


# ---------------------------------------------------------------------------------------------
# Rule parameters
# ---------------------------------------------------------------------------------------------

TAGS = "tags"  # parameter type: one tag or a list of tags


@dataclass(frozen=True)
class Option:
    """One rule parameter: type, default, documentation and bounds."""

    type: Any  # int, float, str, TAGS
    default: Any
    doc: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    optional: bool = False  # null allowed

    def type_name(self) -> str:
        name = {int: "integer", float: "number", str: "string", TAGS: "tag or list of tags"}[self.type]
        return f"{name} or null" if self.optional else name

    def problem(self, value: Any) -> str | None:
        """Why ``value`` does not fit, or None."""
        if value is None:
            return None if self.optional else f"expected {self.type_name()}, got null"
        if isinstance(value, bool) or not _fits(value, self.type):
            return f"expected {self.type_name()}, got {value!r} ({_TYPE_NAMES.get(type(value), type(value).__name__)})"
        if self.choices is not None and value not in self.choices:
            return f"expected one of {', '.join(self.choices)}, got {value!r}"
        if self.min is not None and value < self.min:
            return f"expected {self.type_name()} >= {self.min:g}, got {value!r}"
        if self.max is not None and value > self.max:
            return f"expected {self.type_name()} <= {self.max:g}, got {value!r}"
        return None

    def describe_default(self) -> str:
        if isinstance(self.default, tuple):
            return "[" + ", ".join(self.default) + "]"
        return "null" if self.default is None else str(self.default)


_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "list", dict: "mapping"}


def _fits(value: Any, tp: Any) -> bool:
    if tp is TAGS:
        return (isinstance(value, str) and bool(value)) or (
            isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)
        )
    if tp is float:
        return isinstance(value, (int, float))
    return isinstance(value, tp)


COMMON_OPTIONS = {
    "action": Option(
        str, "warn", "warn: only report; stop: also end training at the end of the step.", choices=ACTIONS
    ),
    "severity": Option(str, None, "info, warning or critical (default: per rule).", choices=SEVERITIES, optional=True),
    "cooldown": Option(int, 100, "Steps after an alert during which the same rule and tag stay quiet.", min=0),
}


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------


class Rule(abc.ABC):
    """Base class: parameters, per-tag cooldown, and the alert factory."""

    name: ClassVar[str]
    summary: ClassVar[str]
    options: ClassVar[dict[str, Option]]
    default_severity: ClassVar[str] = "warning"
    watcher_only: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        merged = {**{key: opt.default for key, opt in self.all_options().items()}, **params}
        self.params = merged
        self.action: str = merged["action"]
        self.severity: str = merged["severity"] or self.default_severity
        self.cooldown: int = merged["cooldown"]
        self._last_fired: dict[str, int] = {}

    @classmethod
    def all_options(cls) -> dict[str, Option]:
        return {**cls.options, **COMMON_OPTIONS}

    @classmethod
    def cross_check(cls, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(parameter, message) for rules involving several parameters; types are already right."""
        del params
        return []

    def tags(self) -> tuple[str, ...]:
        tag = self.params.get("tag")
        return (tag,) if isinstance(tag, str) else tuple(tag or ())

    @abc.abstractmethod
    def update(self, tag: str, step: int, value: float) -> Alert | None:
        """Take one point of ``tag``; return an alert when the rule fires (and is not cooling down)."""

    def _fire(self, tag: str, step: int, value: float, baseline: float | None, message: str) -> Alert | None:
        last = self._last_fired.get(tag)
        if last is not None and last <= step < last + self.cooldown:
            return None
        self._last_fired[tag] = step
        return Alert(self.name, tag, step, value, baseline, message, self.severity, self.action)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


class NonFiniteRule(Rule):
    name = "nonfinite"
    summary = "A value is NaN or infinite."
    default_severity = "critical"
    options: ClassVar[dict[str, Option]] = {
        "tag": Option(TAGS, (metrics.TRAIN_LOSS, metrics.TRAIN_GRAD_NORM), "Tag(s) to check."),
    }

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if math.isfinite(value):
            return None
        return self._fire(tag, step, value, None, f"{tag} is {value} at step {step}")


class SpikeRule(Rule):
    name = "spike"
    summary = "A value jumps above median + k * MAD of the previous `window` points."
    options: ClassVar[dict[str, Option]] = {
        "tag": Option(TAGS, (metrics.TRAIN_LOSS, metrics.TRAIN_GRAD_NORM), "Tag(s) to check."),
        "k": Option(float, 8.0, "How many MADs above the rolling median counts as a spike.", min=0),
        "window": Option(int, 100, "Rolling window (points) for the median and MAD.", min=3),
        "min_points": Option(int, 50, "Points needed in the window before the rule can fire.", min=3),
        "min_rel_scale": Option(
            float, 0.01, "Floor of the MAD as a fraction of |median|, so a flat series is not all spikes.", min=0
        ),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.k: float = self.params["k"]
        self.min_points: int = self.params["min_points"]
        self.min_rel_scale: float = self.params["min_rel_scale"]
        self._windows = {tag: RollingWindow(self.params["window"]) for tag in self.tags()}

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
                    f"{tag} spiked to {_num(value)} at step {step} (rolling median {_num(median)}, "
                    f"bound median + {self.k:g} MAD = {_num(bound)})"
                )
                alert = self._fire(tag, step, value, median, message)
        window.add(value)
        return alert


class PlateauRule(Rule):
    name = "plateau"
    summary = "No improvement of at least `min_delta` for `patience` steps."
    options: ClassVar[dict[str, Option]] = {
        "tag": Option(TAGS, (metrics.TRAIN_LOSS,), "Tag(s) to check."),
        "min_delta": Option(float, 0.0, "Smallest change that counts as an improvement.", min=0),
        "patience": Option(int, 500, "Steps without improvement before the rule fires.", min=1),
        "mode": Option(str, "min", "min: lower is better (loss); max: higher is better.", choices=("min", "max")),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.min_delta: float = self.params["min_delta"]
        self.patience: int = self.params["patience"]
        self.sign = 1.0 if self.params["mode"] == "min" else -1.0
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
            f"(best {_num(best[0])} at step {best[1]}, now {_num(value)})"
        )
        return self._fire(tag, step, value, best[0], message)


class ThresholdRule(Rule):
    name = "threshold"
    summary = "A value above `above` or below `below` for `for_steps` consecutive points."
    options: ClassVar[dict[str, Option]] = {
        "tag": Option(TAGS, None, "Tag(s) to check (required)."),
        "above": Option(float, None, "Fire when the value is greater than this.", optional=True),
        "below": Option(float, None, "Fire when the value is less than this.", optional=True),
        "for_steps": Option(int, 1, "Consecutive points out of bounds needed to fire.", min=1),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.above: float | None = self.params["above"]
        self.below: float | None = self.params["below"]
        self.for_steps: int = self.params["for_steps"]
        self._run: dict[str, int] = dict.fromkeys(self.tags(), 0)

    @classmethod
    def cross_check(cls, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        problems = []
        if params.get("tag") is None:
            problems.append(("tag", "required: the tag to compare, e.g. train/grad_norm"))
        if params.get("above") is None and params.get("below") is None:
            problems.append(("above", "give 'above', 'below' or both"))
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
        return self._fire(tag, step, value, bound, f"{tag} = {_num(value)} at step {step}, {side} {_num(bound)}")


class ThroughputDropRule(Rule):
    name = "throughput_drop"
    summary = "Throughput below (1 - ratio) x its rolling median for `for_steps` consecutive points."
    options: ClassVar[dict[str, Option]] = {
        "tag": Option(TAGS, (metrics.PERF_TOKENS_PER_S,), "Tag(s) to check (e.g. perf/samples_per_s)."),
        "ratio": Option(float, 0.3, "Relative drop that counts: 0.3 fires below 70% of the median.", min=0, max=1),
        "window": Option(int, 50, "Rolling window (points) for the median.", min=3),
        "for_steps": Option(int, 3, "Consecutive low points needed to fire.", min=1),
        "min_points": Option(int, 10, "Points needed in the window before the rule can fire.", min=1),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.keep: float = 1.0 - self.params["ratio"]
        self.for_steps: int = self.params["for_steps"]
        self.min_points: int = self.params["min_points"]
        self._windows = {tag: RollingWindow(self.params["window"]) for tag in self.tags()}
        self._low: dict[str, int] = dict.fromkeys(self.tags(), 0)

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
                        f"{tag} = {_num(value)} at step {step}: below {self.keep:.0%} of its rolling median "
                        f"{_num(median)} for {self._low[tag]} points"
                    )
                    alert = self._fire(tag, step, value, median, message)
            else:
                self._low[tag] = 0
        window.add(value)
        return alert


class LossScaleCollapseRule(Rule):
    name = "loss_scale_collapse"
    summary = "Repeated overflow, or the loss scale falling below `min_scale`."
    default_severity = "critical"
    options: ClassVar[dict[str, Option]] = {
        "overflow_tag": Option(str, metrics.TRAIN_OVERFLOW, "Tag of the per-step overflow flag (0 or 1)."),
        "scale_tag": Option(str, metrics.TRAIN_LOSS_SCALE, "Tag of the loss scale."),
        "max_overflows": Option(int, 5, "Overflowed points within `window` points that fire the rule.", min=1),
        "window": Option(int, 100, "Points over which overflows are counted.", min=1),
        "min_scale": Option(float, 1.0, "Fire when the loss scale is below this.", min=0),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.overflow_tag: str = self.params["overflow_tag"]
        self.scale_tag: str = self.params["scale_tag"]
        self.max_overflows: int = self.params["max_overflows"]
        self.min_scale: float = self.params["min_scale"]
        self._recent: deque[bool] = deque(maxlen=self.params["window"])
        self._count = 0

    def tags(self) -> tuple[str, ...]:
        return (self.overflow_tag, self.scale_tag)

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if tag == self.scale_tag:
            if value < self.min_scale:
                message = f"loss scale {tag} fell to {_num(value)} at step {step} (below {_num(self.min_scale)})"
                return self._fire(tag, step, value, self.min_scale, message)
            return None
        overflowed = not value < 0.5  # NaN counts as an overflow
        if len(self._recent) == self._recent.maxlen:
            self._count -= self._recent[0]
        self._recent.append(overflowed)
        self._count += overflowed
        if not overflowed or self._count < self.max_overflows:
            return None
        message = f"{self._count} overflowed steps among the last {len(self._recent)} (at step {step})"
        return self._fire(tag, step, float(self._count), float(self.max_overflows), message)


class StallRule(Rule):
    """Evaluated against the clock by ``mftb watch``; see :meth:`AlertEngine.check_stall`."""

    name = "stall"
    summary = "No new step for k x the median step interval (mftb watch only)."
    default_severity = "critical"
    watcher_only = True
    options: ClassVar[dict[str, Option]] = {
        "k": Option(float, 10.0, "Multiple of the median interval between steps that counts as a stall.", min=1),
        "window": Option(int, 50, "Intervals in the rolling median.", min=2),
        "min_silence": Option(float, 300.0, "Seconds of silence always tolerated, however fast the steps.", min=0),
        "give_up_after": Option(
            float, 86400.0, "Seconds after which a silent run counts as finished, not stalled; 0: never.", min=0
        ),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.k: float = self.params["k"]
        self.min_silence: float = self.params["min_silence"]
        self.give_up_after: float = self.params["give_up_after"]
        self._intervals = RollingWindow(self.params["window"])
        self._last_step: int | None = None
        self._last_wall: float | None = None
        self._fired = False

    def tags(self) -> tuple[str, ...]:
        return ()

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


RULES: dict[str, type[Rule]] = {
    cls.name: cls
    for cls in (
        NonFiniteRule,
        SpikeRule,
        PlateauRule,
        ThresholdRule,
        ThroughputDropRule,
        LossScaleCollapseRule,
        StallRule,
    )
}

# What runs when no rules are configured.
DEFAULT_RULES: tuple[dict[str, Any], ...] = (
    {"rule": "nonfinite"},
    {"rule": "spike"},
    {"rule": "throughput_drop"},
    {"rule": "loss_scale_collapse"},
)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def build_rules(specs: Any, where: str = "rules", watcher: bool = False) -> tuple[list[Rule], list[Problem]]:
    """Rules from ``[{rule: NAME, param: value, ...}, ...]``, and every problem found.

    ``watcher`` allows watcher-only rules (stall).
    """
    if not isinstance(specs, (list, tuple)):
        return [], [Problem(where, f"expected a list of rules like [{{rule: spike, tag: train/loss}}], got {specs!r}")]
    rules: list[Rule] = []
    problems: list[Problem] = []
    for index, spec in enumerate(specs):
        key = f"{where}[{index}]"
        if not isinstance(spec, Mapping):
            problems.append(Problem(key, f"expected a mapping like {{rule: spike, k: 6}}, got {spec!r}"))
            continue
        name = spec.get("rule")
        if not isinstance(name, str) or name not in RULES:
            allowed = ", ".join(RULES)
            if name is None:
                problems.append(Problem(f"{key}.rule", f"missing; one of: {allowed}"))
            else:
                hint = _did_you_mean(str(name), RULES)
                problems.append(Problem(f"{key}.rule", f"unknown rule {name!r}{hint} (allowed: {allowed})"))
            continue
        cls = RULES[name]
        if cls.watcher_only and not watcher:
            problems.append(Problem(f"{key}.rule", f"{name!r} is evaluated by 'mftb watch' only, not during training"))
            continue
        options = cls.all_options()
        params: dict[str, Any] = {}
        before = len(problems)
        for param, value in spec.items():
            if param == "rule":
                continue
            option = options.get(param)
            if option is None:
                hint = _did_you_mean(str(param), options)
                allowed = ", ".join(options)
                problems.append(Problem(f"{key}.{param}", f"unknown parameter of {name}{hint} (allowed: {allowed})"))
                continue
            reason = option.problem(value)
            if reason:
                problems.append(Problem(f"{key}.{param}", reason))
            else:
                params[param] = float(value) if option.type is float and value is not None else value
        if len(problems) == before:
            merged = {**{p: o.default for p, o in options.items()}, **params}
            problems += [Problem(f"{key}.{param}", message) for param, message in cls.cross_check(merged)]
        if len(problems) == before:
            rules.append(cls(**params))
    return rules, problems


def parse_rules(specs: Any, where: str = "rules", watcher: bool = False, owner: str = "alerts") -> list[Rule]:
    """Like :func:`build_rules` but raises :class:`ConfigError` listing every problem."""
    rules, problems = build_rules(specs, where, watcher)
    if problems:
        raise ConfigError.for_owner(owner, problems)
    return rules


def describe_rules() -> str:
    """Every rule with its parameters and defaults, as plain text (``mftb watch --list-rules``)."""
    lines = []
    for name, cls in RULES.items():
        lines.append(f"{name}: {cls.summary} Default severity: {cls.default_severity}.")
        for param, option in cls.all_options().items():
            lines.append(f"    {param} = {option.describe_default()}  ({option.type_name()}) {option.doc}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Engine
# ---------------------------------------------------------------------------------------------


class AlertEngine:
    """Feeds points to the rules that watch their tag. One engine per monitored run."""

    def __init__(self, rules: Sequence[Rule], run: str = "") -> None:
        self.run = run
        self._by_tag: dict[str, list[Rule]] = {}
        self._stall = [rule for rule in rules if isinstance(rule, StallRule)]
        for rule in rules:
            for tag in rule.tags():
                self._by_tag.setdefault(tag, []).append(rule)
        self.tags = frozenset(self._by_tag)

    def observe(self, step: int, values: Mapping[str, float]) -> list[Alert]:
        """One step's values (the callback's path). Returns the alerts fired, usually none."""
        alerts: list[Alert] = []
        for tag, rules in self._by_tag.items():
            value = values.get(tag)
            if value is None:
                continue
            for rule in rules:
                alert = rule.update(tag, step, value)
                if alert is not None:
                    alerts.append(self._label(alert))
        return alerts

    def observe_point(self, tag: str, step: int, value: float) -> list[Alert]:
        """One point of one tag (the watcher's path)."""
        alerts = []
        for rule in self._by_tag.get(tag, ()):
            alert = rule.update(tag, step, value)
            if alert is not None:
                alerts.append(self._label(alert))
        return alerts

    def progress(self, step: int, wall_time: float) -> None:
        for rule in self._stall:
            rule.progress(step, wall_time)

    def check_stall(self, now: float) -> list[Alert]:
        return [self._label(alert) for rule in self._stall if (alert := rule.check(now)) is not None]

    def _label(self, alert: Alert) -> Alert:
        if not self.run:
            return alert
        return replace(alert, run=self.run)
