"""Per-parameter squared gradient norms from gradient hooks, for MindFormers 2.x's PyNative trainer.

That trainer frees the gradients before any callback's step end, so they are read where they exist:
a hook on each parameter (``Parameter.register_hook``, as MindFormers' own TrainStateMonitor does)
sees each micro-batch's gradient ``g_m`` as the backward produces it, before it is added to
``param.grad`` and before clipping. The step's gradient is their sum ``S = sum g_m``; its squared norm
is built up without keeping a copy of it: ``|S_m|^2 = |S_(m-1)|^2 + g_m . (2 S_(m-1) + g_m)``, where
``S_(m-1)`` is what the parameter's ``grad`` holds when the hook runs. So the result is the squared
norm of the gradient the optimizer steps with (the classic wrapper's ``local_norm`` of the summed
micro-batches), and over all parameters it adds up to the trainer's own ``grad_norm`` on one device.

The trainer scales each backward by the loss sense (``1 / (data x tensor x context parallel)``) and
by ``1 / micro-batches``; the sense is divided out here, so a rank's values are the norms of its own
gradient before the data-parallel reduction, as the classic trainer's wrapper gives them.

The hooks are registered only for the steps that are read (:meth:`GradientHooks.arm` at a logged
step's begin, removed by :meth:`read`): other steps pay nothing. On a device, each hook adds one
small reduction there and the values come to the host as one vector per read step; on a CPU the
gradients are host memory already and numpy reads them in place (MindSpore's eager ops cost a few
hundred microseconds each there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.host_values import host_copy


class GradientHooks:
    def __init__(self, params: Sequence[Any], sense: float, on_host: bool) -> None:
        """``params``: the parameters whose gradients the optimizer steps with, in its order; ``sense``:
        the trainer's loss sense (the factor each backward carries); ``on_host``: read with numpy (CPU)."""
        self.names = [str(param.name) for param in params]
        self._params = list(params)
        self._unscale = 1.0 / (sense * sense)
        self._on_host = on_host
        self._handles: list[Any] = []
        self._squares = np.zeros(len(self._params), dtype=np.float64)  # host path
        self._indices: list[int] = []  # device path: which parameter each value belongs to
        self._values: list[Any] = []

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def arm(self) -> None:
        """At the begin of a step that will be read: hooks on every parameter, sums cleared."""
        self.disarm()
        self._squares[:] = 0.0
        self._indices, self._values = [], []
        make = self._host_hook if self._on_host else self._device_hook
        self._handles = [param.register_hook(make(index, param)) for index, param in enumerate(self._params)]

    def disarm(self) -> None:
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    def read(self) -> np.ndarray | None:
        """At the step's end: each parameter's squared gradient norm (float64, the optimizer's order), or
        None when the hooks were not armed for this step."""
        if not self._handles:
            return None
        self.disarm()
        if self._on_host:
            squares = self._squares.copy()
        elif self._values:
            from mindspore import ops

            values = host_copy(ops.stack(self._values)).astype(np.float64)
            squares = np.bincount(self._indices, weights=values, minlength=len(self._params))
        else:
            squares = np.zeros(len(self._params), dtype=np.float64)
        return squares * self._unscale

    def _host_hook(self, index: int, param: Any) -> Any:
        squares = self._squares

        def hook(grad: Any) -> Any:
            current = _flat_host(grad)
            summed = param.grad
            if summed is None:
                squares[index] += float(np.dot(current, current))
            else:  # g . (2 S + g): the growth of |S|^2 as g is added to the sum so far
                squares[index] += float(np.dot(current, 2.0 * _flat_host(summed) + current))
            return grad

        return hook

    def _device_hook(self, index: int, param: Any) -> Any:
        from mindspore import mint

        indices, values = self._indices, self._values

        def hook(grad: Any) -> Any:
            current = grad.float()
            summed = param.grad
            if summed is None:
                value = mint.mul(current, current).sum()
            else:
                value = mint.mul(current, mint.add(current, summed.float(), alpha=2)).sum()
            indices.append(index)
            values.append(value)
            return grad

        return hook


def _flat_host(tensor: Any) -> np.ndarray:
    """A CPU tensor's values in place, float32."""
    return np.asarray(tensor.asnumpy(), dtype=np.float32).reshape(-1)
