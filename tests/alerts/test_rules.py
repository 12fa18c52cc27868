"""Alert rule parameters go through the callbacks' schema machinery: each is declared once, in the
rule's ``__init__``, and validated, documented and listed from there."""

from __future__ import annotations

import inspect

import pytest

from mindformers_tbplugin.alerts.engine import describe_rules, parse_rules
from mindformers_tbplugin.alerts.rule_catalog import RULES
from mindformers_tbplugin.alerts.rules import NonFiniteRule, PlateauRule, Rule, SpikeRule, ThresholdRule
from mindformers_tbplugin.schema import ConfigError, Problem, check_entry, params_of

COMMON = ["action", "severity", "cooldown"]


@pytest.mark.parametrize("cls", RULES.values(), ids=list(RULES))
def test_a_rule_has_its_own_parameters_then_the_common_ones_each_documented(cls: type[Rule]) -> None:
    own = [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "common")]
    params = params_of(cls)
    assert [p.name for p in params] == [*own, *COMMON]
    assert all(p.doc for p in params), [p.name for p in params if not p.doc]


def test_ranges_choices_and_tags_are_checked_by_the_schema() -> None:
    assert check_entry(SpikeRule, {"k": -1, "window": 2.5}) == [
        Problem("k", "expected number >= 0, got -1"),
        Problem("window", "expected integer, got 2.5 (number)"),
    ]
    assert check_entry(PlateauRule, {"mode": "avg"}) == [Problem("mode", "expected one of 'min', 'max', got 'avg'")]
    assert check_entry(NonFiniteRule, {"tag": []}) == [Problem("tag", "expected tag or list of tags, got [] (list)")]
    assert check_entry(NonFiniteRule, {"tag": ["train/loss", ""]})[0].key == "tag"
    assert check_entry(NonFiniteRule, {"tag": "train/loss"}) == []
    assert check_entry(NonFiniteRule, {"severity": None, "cooldown": -1}) == [
        Problem("cooldown", "expected integer >= 0, got -1")
    ]


def test_threshold_needs_its_tag_and_a_bound() -> None:
    assert check_entry(ThresholdRule, {}) == [
        Problem("tag", "required: the tag to compare, e.g. train/grad_norm"),
        Problem("above", "give 'above', 'below' or both"),
    ]
    assert check_entry(ThresholdRule, {"tag": None}) == [Problem("tag", "expected tag or list of tags, got null")]
    assert check_entry(ThresholdRule, {"tag": "train/loss", "below": 0.5}) == []


def test_a_problem_names_the_rule_entry_the_key_and_what_is_allowed() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules([{"rule": "nonfinite"}, {"rule": "plateau", "patiense": 3, "mode": "avg"}], owner="AlertMonitor")
    assert str(caught.value).splitlines()[1:] == [
        "  - AlertMonitor.rules[1].patiense: unknown parameter of plateau; did you mean 'patience'? "
        "(allowed: tag, min_delta, patience, mode, action, severity, cooldown)",
        "  - AlertMonitor.rules[1].mode: expected one of 'min', 'max', got 'avg'",
    ]


def test_yaml_integers_reach_number_parameters_as_floats() -> None:
    (rule,) = parse_rules([{"rule": "threshold", "tag": "train/grad_norm", "above": 10, "cooldown": 5}])
    assert (rule.above, type(rule.above), rule.below, rule.cooldown) == (10.0, float, None, 5)
    assert (rule.tags(), rule.severity, rule.action) == (("train/grad_norm",), "warning", "warn")


def test_listed_rule_shows_defaults_types_and_docs_from_the_signature() -> None:
    text = describe_rules()
    assert (
        "threshold: A value above `above` or below `below` for `for_steps` consecutive points. "
        "Default severity: warning.\n"
        "    tag = null  (tag or list of tags) Tag(s) to check (required).\n"
        "    above = null  (number or null) Fire when the value is greater than this.\n"
    ) in text
    assert "    severity = null  (string or null) info, warning or critical (default: per rule).\n" in text
