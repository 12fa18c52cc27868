"""The ``rules:`` configuration and the engine that feeds points to the rules, for AlertMonitor and
``mftb watch``.

Rules are configured with a YAML-style list such as ``[{rule: spike, tag: train/loss, k: 6},
{rule: nonfinite, action: stop}]``; :func:`build_rules` checks each entry against its rule's
parameters (the same schema machinery as the callbacks') and reports every problem at once.
No MindSpore import here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.rule_catalog import RULES
from mindformers_tbplugin.alerts.rules import Rule, StallRule
from mindformers_tbplugin.schema import (
    ConfigError,
    Param,
    Problem,
    check_arguments,
    check_entry,
    did_you_mean,
    params_of,
    summary_of,
)

# What runs when no rules are configured.
DEFAULT_RULES: tuple[dict[str, Any], ...] = (
    {"rule": "nonfinite"},
    {"rule": "spike"},
    {"rule": "throughput_drop"},
    {"rule": "loss_scale_collapse"},
    {"rule": "expert_collapse"},
    {"rule": "baseline_divergence"},  # judges only a run with a baseline (its compare/* tags)
)


def _hint(word: Any, candidates: Sequence[str]) -> str:
    """``; did you mean 'x'?`` to follow an unknown name, or nothing."""
    hint = did_you_mean(word, candidates)
    return f"; {hint}" if hint else ""


def _rule_class(spec: Any, key: str, watcher: bool) -> tuple[type[Rule] | None, Problem | None]:
    """The rule class ``spec`` names, or why there is none."""
    if not isinstance(spec, Mapping):
        return None, Problem(key, f"expected a mapping like {{rule: spike, k: 6}}, got {spec!r}")
    name = spec.get("rule")
    allowed = ", ".join(RULES)
    if name is None:
        return None, Problem(f"{key}.rule", f"missing; one of: {allowed}")
    if not isinstance(name, str) or name not in RULES:
        return None, Problem(f"{key}.rule", f"unknown rule {name!r}{_hint(name, list(RULES))} (allowed: {allowed})")
    if RULES[name].watcher_only and not watcher:
        return None, Problem(f"{key}.rule", f"{name!r} is evaluated by 'mftb watch' only, not during training")
    return RULES[name], None


def _as_declared(param: Param, value: Any) -> Any:
    """YAML writes ``6`` for a number parameter: the rule gets ``6.0``, as it declares."""
    return float(value) if param.type is float and value is not None else value


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
        cls, problem = _rule_class(spec, key, watcher)
        if cls is None:
            problems.append(problem)
            continue
        params = {param.name: param for param in params_of(cls)}
        allowed = ", ".join(params)
        arguments = {name: value for name, value in spec.items() if name in params}
        found = [
            Problem(name, f"unknown parameter of {cls.name}{_hint(name, list(params))} (allowed: {allowed})")
            for name in spec
            if name != "rule" and name not in params
        ]
        # The cross-field checks run only on entries whose every key is known and well typed.
        found += check_arguments(cls, arguments) if found else check_entry(cls, arguments)
        if found:
            problems += [Problem(f"{key}.{p.key}", p.message) for p in found]
        else:
            rules.append(cls(**{name: _as_declared(params[name], value) for name, value in arguments.items()}))
    return rules, problems


def parse_rules(specs: Any, where: str = "rules", watcher: bool = False, owner: str = "alerts") -> list[Rule]:
    """Like :func:`build_rules` but raises :class:`ConfigError` listing every problem."""
    rules, problems = build_rules(specs, where, watcher)
    if problems:
        raise ConfigError.for_owner(owner, problems)
    return rules


def _shown(default: Any) -> str:
    """A default as YAML would spell it."""
    if isinstance(default, tuple):
        return "[" + ", ".join(default) + "]"
    return "null" if default is None else str(default)


def describe_rules() -> str:
    """Every rule with its parameters and defaults, as plain text (``mftb watch --list-rules``)."""
    lines = []
    for name, cls in RULES.items():
        lines.append(f"{name}: {summary_of(cls)} Default severity: {cls.default_severity}.")
        for param in params_of(cls):
            lines.append(f"    {param.name} = {_shown(param.default)}  ({param.type_name()}) {param.doc}")
    return "\n".join(lines)


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
