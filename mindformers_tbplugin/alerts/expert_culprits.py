"""Which layer and which experts: the MoE layers behind an alert on a ``moe/`` tag.

TensorBoardMonitor publishes each read's layer x expert loads just before the ``moe/*`` values they
produced; an alert on one of those values gets the layer it names (or, for the job-wide tags, the
layers with the most dead experts, else the worst MaxVio) and their busiest and idle experts.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.pipeline import metrics

KEPT_READS = 16  # an interval's reads are published before its values are written
TOP_LAYERS = 3


class ExpertCulprits:
    def __init__(self) -> None:
        self._reads: OrderedDict[int, tuple[Any, Any]] = OrderedDict()

    def remember(self, step: int, relative: Any, statistics: Any) -> None:
        """A read's loads (each expert over its layer's mean) and the LoadStatistics that scored them."""
        self._reads[step] = (relative, statistics)
        while len(self._reads) > KEPT_READS:
            self._reads.popitem(last=False)

    def annotate(self, alert: Alert) -> Alert:
        """The alert with the culprit layers and experts appended (unchanged for other tags)."""
        read = self._reads.get(alert.step)
        if read is None or not alert.tag.startswith(metrics.MOE_PREFIX):
            return alert
        relative, statistics = read
        rows = self._rows(alert.tag, relative, statistics)
        if not rows:
            return alert
        described = "; ".join(statistics.describe_collapse(relative, row) for row in rows)
        return replace(alert, message=f"{alert.message}; {described}")

    @staticmethod
    def _rows(tag: str, relative: np.ndarray, statistics: Any) -> list[int]:
        groups = statistics.routers.groups
        named = tag[len(metrics.MOE_PREFIX) :].rsplit("/", 1)[0]
        if named in groups:
            return [groups.index(named)]
        known = ~np.isnan(relative[:, 0])
        dead = np.where(known, (np.nan_to_num(relative, nan=1.0) < statistics.dead_fraction).sum(axis=1), 0)
        if dead.any():
            order = np.argsort(-dead, kind="stable")
            return [int(row) for row in order[:TOP_LAYERS] if dead[row] > 0]
        violation = np.where(known, np.nanmax(np.nan_to_num(relative, nan=0.0), axis=1), -np.inf)
        return [int(np.argmax(violation))] if known.any() else []
