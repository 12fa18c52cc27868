"""The step's parameter change per group, for the update-to-weight ratio: ``update_norm/<group>`` is the
L2 norm of (parameters after the step - parameters before it), ``update_ratio/<group>`` that norm over
the norm of the parameters before the step; ``/total`` over all trainable parameters.

A due step's parameters are copied to the host at its begin and subtracted, in that copy, from their
values at its end (read in place where the parameters are host memory, a host copy otherwise; float32),
only on the steps ``optimizer_state_every`` chooses: the device keeps no second copy of the weights
(which could exhaust its memory at a peak), and between due steps nothing is kept. Parameters split
across ranks (FSDP) are not read: a rank holds only its part of each (said once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.host_values import float32_copy, sharded
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.gradient_groups import GroupLayout


class ParameterUpdates:
    """One training's trainable parameters, their groups, and the copy taken at a due step's begin."""

    def __init__(self, params: Sequence[Any], layout: GroupLayout) -> None:
        self.params, self.layout = list(params), layout
        self._before: list[np.ndarray] | None = None
        self._step: int | None = None

    @classmethod
    def for_parameters(cls, params: Sequence[Any], grouping: str | Sequence[str]) -> ParameterUpdates | None:
        if not params:
            return None
        if any(sharded(param) for param in params):
            logger.warning(
                "TensorBoardMonitor: the parameters are split across ranks (FSDP): a rank holds only its part of "
                "each, so update_norm/ and update_ratio/ are not written"
            )
            return None
        return cls(params, GroupLayout.of([str(param.name) for param in params], grouping))

    def step_began(self, step: int) -> None:
        """Copies the parameters as the step finds them (a due step only)."""
        self._before = [float32_copy(param).reshape(-1) for param in self.params]
        self._step = step

    def tags(self, step: int) -> dict[str, float]:
        """``update_norm/*`` and ``update_ratio/*`` of ``step``; empty when its begin was not seen."""
        before, self._before = self._before, None
        if before is None or self._step != step:
            return {}
        changes = np.empty(len(before), dtype=np.float64)
        weights = np.empty(len(before), dtype=np.float64)
        for index, (param, old) in enumerate(zip(self.params, before, strict=True)):
            weights[index] = float(np.dot(old, old))
            change = np.subtract(float32_copy(param, copy=False).reshape(-1), old, out=old)  # old is not needed again
            changes[index] = float(np.dot(change, change))
        layout = self.layout
        change_squares, weight_squares = layout.group_squares(changes), layout.group_squares(weights)
        values = layout.tags(metrics.UPDATE_NORM_PREFIX, change_squares, metrics.UPDATE_NORM_PREFIX + "total")
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.sqrt(change_squares / weight_squares)
        total = float(np.sqrt(change_squares.sum() / weight_squares.sum())) if weight_squares.sum() else float("nan")
        for group, ratio in zip(layout.groups, ratios.tolist(), strict=True):
            values[metrics.UPDATE_RATIO_PREFIX + group] = ratio
        values[metrics.UPDATE_RATIO_PREFIX + "total"] = total
        return values
