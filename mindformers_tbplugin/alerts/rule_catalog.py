"""Every alert rule by the name a ``rules:`` entry gives it."""

from __future__ import annotations

from mindformers_tbplugin.alerts.collapse_rules import ExpertCollapseRule, LossScaleCollapseRule
from mindformers_tbplugin.alerts.divergence_rule import BaselineDivergenceRule
from mindformers_tbplugin.alerts.rules import (
    NonFiniteRule,
    PlateauRule,
    Rule,
    SpikeRule,
    StallRule,
    ThresholdRule,
    ThroughputDropRule,
)

RULES: dict[str, type[Rule]] = {
    cls.name: cls
    for cls in (
        NonFiniteRule,
        SpikeRule,
        PlateauRule,
        ThresholdRule,
        ThroughputDropRule,
        LossScaleCollapseRule,
        ExpertCollapseRule,
        BaselineDivergenceRule,
        StallRule,
    )
}
