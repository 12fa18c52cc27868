"""Rules on a training's collapse: of the loss scale (mixed precision), and of a mixture-of-experts
model's routing. Same contract as :mod:`mindformers_tbplugin.alerts.rules`."""

from __future__ import annotations

from collections import deque
from typing import Annotated, Any

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.rules import Rule, number_text
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.schema import Range


class LossScaleCollapseRule(Rule):
    """Repeated overflow, or the loss scale falling below `min_scale`.

    Args:
        overflow_tag: Tag of the per-step overflow flag (0 or 1).
        scale_tag: Tag of the loss scale.
        max_overflows: Overflowed points within `window` points that fire the rule.
        window: Points over which overflows are counted.
        min_scale: Fire when the loss scale is below this.
    """

    name = "loss_scale_collapse"
    default_severity = "critical"

    def __init__(
        self,
        overflow_tag: str = metrics.TRAIN_OVERFLOW,
        scale_tag: str = metrics.TRAIN_LOSS_SCALE,
        max_overflows: Annotated[int, Range(min=1)] = 5,
        window: Annotated[int, Range(min=1)] = 100,
        min_scale: Annotated[float, Range(min=0)] = 1.0,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._tags = (overflow_tag, scale_tag)
        self.scale_tag = scale_tag
        self.max_overflows = max_overflows
        self.min_scale = min_scale
        self._recent: deque[bool] = deque(maxlen=window)
        self._count = 0

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        if tag == self.scale_tag:
            if value < self.min_scale:
                bound = number_text(self.min_scale)
                message = f"loss scale {tag} fell to {number_text(value)} at step {step} (below {bound})"
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


class ExpertCollapseRule(Rule):
    """Routing collapse in a mixture-of-experts model: experts left (almost) without tokens, or the
    worst layer's load imbalance above a bound, for `for_reads` consecutive reads of the routers
    (TensorBoardMonitor's moe_every). The alert names the layer and its experts.

    Args:
        dead_experts: Fire when at least this many experts, over all MoE layers, get under
            TensorBoardMonitor's dead_expert_fraction of their layer's mean load (moe/dead_experts).
        max_violation: Fire when the worst layer's MaxVio (max load / mean load - 1, moe/max_violation)
            is above this; null: not checked.
        for_reads: Consecutive reads out of bounds needed to fire.
    """

    name = "expert_collapse"

    def __init__(
        self,
        dead_experts: Annotated[int, Range(min=1)] = 1,
        max_violation: Annotated[float | None, Range(min=0)] = None,
        for_reads: Annotated[int, Range(min=1)] = 3,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self._tags = (metrics.MOE_DEAD_EXPERTS, metrics.MOE_MAX_VIOLATION)
        self.bounds = {metrics.MOE_DEAD_EXPERTS: float(dead_experts), metrics.MOE_MAX_VIOLATION: max_violation}
        self.for_reads = for_reads
        self._run: dict[str, int] = dict.fromkeys(self._tags, 0)

    def update(self, tag: str, step: int, value: float) -> Alert | None:
        bound = self.bounds[tag]
        dead = tag == metrics.MOE_DEAD_EXPERTS
        if bound is None or not (value >= bound if dead else value > bound):
            self._run[tag] = 0
            return None
        self._run[tag] += 1
        if self._run[tag] < self.for_reads:
            return None
        if dead:
            what = f"{value:g} dead expert(s)"
        else:
            what = f"the worst layer's MaxVio {number_text(value)} (bound {number_text(bound)})"
        message = f"routing collapse at step {step}: {what} for {self._run[tag]} consecutive reads"
        return self._fire(tag, step, value, bound, message)
