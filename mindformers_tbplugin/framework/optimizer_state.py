"""Adam's moment norms per layer group, as MindFormers' TrainingStateMonitor ``optimizer_state_format``
reads them: the optimizer's first and second moments (``moment1``/``moment2``, ``moments1``/``moments2``
or ``exp_avg``/``exp_avg_sq``: MindFormers 2.x's PyNative AdamW, and the Adam-updated parameters of its
Muon), each parameter's L2 norm in float32. Moments split across ranks (FSDP) are not read: a rank holds
only its part of each (said once). On a device each norm is one
MindSpore op where the moment lives and the norms come to the host as one vector (a moment is as large
as its parameter: never copied); on a CPU the moments are host memory already and numpy reads them in
place (MindSpore's eager ops cost about a millisecond each there). A group's norm is the square root
of the sum of its parameters' squared norms, so ``adam_m_norm/total`` is the norm over all parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.collectives import device_target
from mindformers_tbplugin.framework.host_values import host_copy, sharded
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.gradient_groups import GroupLayout

MOMENT_ATTRIBUTES = (("moment1", "moment2"), ("moments1", "moments2"), ("exp_avg", "exp_avg_sq"))


class OptimizerState:
    """The moments of one training's optimizer and their groups."""

    def __init__(self, first: Sequence[Any], second: Sequence[Any], layout: GroupLayout, on_host: bool) -> None:
        self.first, self.second, self.layout = list(first), list(second), layout
        self._squares = _host_squares if on_host else _device_squares

    @classmethod
    def for_optimizer(cls, optimizer: Any, grouping: str | Sequence[str]) -> OptimizerState | None:
        """None when the optimizer keeps no Adam moments (SGD, Lamb's other names, none)."""
        for first_name, second_name in MOMENT_ATTRIBUTES:
            first, second = getattr(optimizer, first_name, None), getattr(optimizer, second_name, None)
            if first is not None and second is not None and len(first) and len(first) == len(second):
                if any(sharded(moment) for moment in first):
                    logger.warning(
                        "TensorBoardMonitor: the optimizer's moments are split across ranks (FSDP): a rank holds "
                        "only its part of each, so adam_m_norm/ and adam_v_norm/ are not written"
                    )
                    return None
                # ``adam_m.model.layers.0.attention.wq.weight``: the parameter's name after the prefix
                names = [str(moment.name).split(".", 1)[-1] for moment in first]
                return cls(first, second, GroupLayout.of(names, grouping), device_target() == "CPU")
        return None

    def describe(self) -> str:
        return f"Adam moment norms of {len(self.first)} parameters in {len(self.layout)} groups"

    def tags(self) -> dict[str, float]:
        """``adam_m_norm/<group>``, ``adam_v_norm/<group>`` and their ``/total``."""
        values: dict[str, float] = {}
        for prefix, moments in ((metrics.ADAM_M_NORM_PREFIX, self.first), (metrics.ADAM_V_NORM_PREFIX, self.second)):
            squares = self._squares(moments)
            values.update(self.layout.tags(prefix, self.layout.group_squares(squares), prefix + "total"))
        return values


def _host_squares(moments: Sequence[Any]) -> np.ndarray:
    """Each moment's squared L2 norm (float64), read in place from host memory."""
    squares = np.empty(len(moments), dtype=np.float64)
    for index, moment in enumerate(moments):
        flat = moment.asnumpy().ravel().astype(np.float32, copy=False)
        squares[index] = float(np.dot(flat, flat))
    return squares


def _device_squares(moments: Sequence[Any]) -> np.ndarray:
    """Each moment's squared L2 norm: one norm op per moment on the device, one host copy of the vector."""
    from mindspore import dtype as mstype
    from mindspore import ops

    norms = [(m if m.dtype == mstype.float32 else m.astype(mstype.float32)).norm() for m in moments]
    return np.square(np.asarray(host_copy(ops.stack(norms)), dtype=np.float64))
