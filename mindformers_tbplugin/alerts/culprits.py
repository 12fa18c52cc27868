"""Which layer: the gradient groups behind an alert on a gradient norm.

With per-layer gradient norms (``grad_norm/<group>``) at a step, an alert on ``train/grad_norm`` or
a ``grad_norm/*`` tag names the three groups that stand out most against their own recent median
(non-finite ones first). Ranking by that ratio rather than by the raw norm is what points at the
culprit: the embedding and the head usually carry the largest norms at every step.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import replace

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.pipeline import metrics

TOP = 3
HISTORY = 20  # logged steps per group median
MIN_HISTORY = 3


def is_gradient_tag(tag: str) -> bool:
    return tag == metrics.TRAIN_GRAD_NORM or tag.startswith(metrics.GRAD_NORM_PREFIX)


def gradient_groups(values: Mapping[str, float]) -> dict[str, float]:
    """``{group: norm}`` of the per-layer gradient norms among a step's written values."""
    prefix = metrics.GRAD_NORM_PREFIX
    return {
        tag[len(prefix) :]: value
        for tag, value in values.items()
        if tag.startswith(prefix) and tag != metrics.GRAD_NORM_TOTAL
    }


class GradientCulprits:
    """The last steps' group norms, and the sentence naming the groups that stand out at a step.

    Per logged step it only keeps a reference to the written values (they are never mutated);
    medians are computed when an alert needs them.
    """

    def __init__(self) -> None:
        self._recent: deque[Mapping[str, float]] = deque(maxlen=HISTORY)

    def remember(self, values: Mapping[str, float]) -> None:
        """A step's written values holding group norms (after that step's alerts were described)."""
        self._recent.append(values)

    def ranked(self, groups: Mapping[str, float]) -> list[tuple[str, float, float | None]]:
        """The top groups as ``(group, norm, norm over its recent median or None)``, non-finite ones first."""
        ratios = {group: self._ratio(group, value) for group, value in groups.items()}
        ranked = sorted(groups.items(), key=lambda item: _rank(item[1], ratios[item[0]]), reverse=True)[:TOP]
        return [(group, value, ratios[group]) for group, value in ranked]

    def describe(self, groups: Mapping[str, float]) -> str:
        """``layers.1 1.41 (38x its median), ...``: the top groups, non-finite ones first."""
        parts = [
            f"{group} {value:.4g}" + (f" ({ratio:.3g}x its median)" if ratio is not None else "")
            for group, value, ratio in self.ranked(groups)
        ]
        return "largest gradient norms against their recent median: " + ", ".join(parts)

    def _ratio(self, group: str, value: float) -> float | None:
        tag = metrics.GRAD_NORM_PREFIX + group
        history = [v for values in self._recent if math.isfinite(v := values.get(tag, math.nan))]
        if len(history) < MIN_HISTORY or not math.isfinite(value):
            return None
        median = statistics.median(history)
        return value / median if median > 0 else None

    def annotate(self, alert: Alert, values: Mapping[str, float]) -> Alert:
        """The alert with the culprit groups appended to its message (unchanged without groups)."""
        groups = gradient_groups(values)
        if not groups or not is_gradient_tag(alert.tag):
            return alert
        return replace(alert, message=f"{alert.message}; {self.describe(groups)}")


def _rank(value: float, ratio: float | None) -> tuple[int, float]:
    """Non-finite first, then by ratio to the median, then (no history yet) by the norm itself."""
    if not math.isfinite(value):
        return (2, 0.0)
    return (1, ratio) if ratio is not None else (0, value)
