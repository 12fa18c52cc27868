"""Per-parameter squared gradient norms from gradient hooks, for MindFormers 2.x's PyNative trainer.

That trainer frees the gradients before any callback's step end, so they are read where they exist:
a hook on each parameter (``Parameter.register_hook``, as MindFormers' own TrainStateMonitor does)
sees each micro-batch's gradient ``g_m`` as the backward produces it, before it is added to ``param.grad`` and
before clipping. The step's gradient is their sum; at the step's last micro-batch the hook adds its
``g`` to what the parameter's ``grad`` holds then (the sum of the earlier ones) and takes the squared
norm of that, without keeping a copy of the gradient; the earlier micro-batches' calls only count. So the
result is the squared norm of the gradient the optimizer steps with (the classic wrapper's
``local_norm`` of the summed micro-batches), and over all parameters it adds up to the trainer's own
``grad_norm`` on one device.

The trainer scales each backward by the loss sense (``1 / (data x tensor x context parallel)``) and
by ``1 / micro-batches``; the sense is divided out here, so a rank's values are the norms of its own
gradient before the data-parallel reduction, as the classic trainer's wrapper gives them.

The hooks are on only for the steps that are read (:meth:`GradientHooks.step_began`: registered at a
logged step's begin, removed at the begin of a step that is not): other steps pay nothing. On a device,
the step's last micro-batch adds one small reduction per parameter there and the values come to the host
as one vector per read step; on a CPU the gradients are host memory already and numpy reads a copy of
them (MindSpore's eager ops cost a few hundred microseconds each there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.host_values import host_copy


class GradientHooks:
    def __init__(
        self, params: Sequence[Any], sense: float, on_host: bool, micro_batches: Callable[[], int] = lambda: 1
    ) -> None:
        """``params``: the parameters whose gradients the optimizer steps with, in its order; ``sense``:
        the trainer's loss sense (the factor each backward carries); ``on_host``: read with numpy (CPU);
        ``micro_batches()``: the backwards of the coming step (the trainer's gradient accumulation steps)."""
        self.names = [str(param.name) for param in params]
        self._params = list(params)
        self._unscale = 1.0 / (sense * sense)
        self._on_host = on_host
        self._micro_batches = micro_batches
        self._last = 1  # the call of each hook that reads: the step's last micro-batch
        self._calls = np.zeros(len(self._params), dtype=np.int64)
        self._read = False
        self._handles: list[Any] = []
        self._squares = np.zeros(len(self._params), dtype=np.float64)  # host path
        self._indices: list[int] = []  # device path: which parameter each value belongs to
        self._values: list[Any] = []

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def step_began(self, logged: bool) -> None:
        """At every step's begin: hooks on every parameter for a step that will be read (kept from the step
        before when it was read too), none otherwise."""
        if not logged:
            self.disarm()
            return
        self._squares[:] = 0.0
        self._calls[:] = 0
        self._last = max(int(self._micro_batches()), 1)
        self._indices.clear()  # in place: the hooks hold these lists
        self._values.clear()
        self._read = False
        if not self._handles:
            make = self._host_hook if self._on_host else self._device_hook
            self._handles = [param.register_hook(make(index, param)) for index, param in enumerate(self._params)]

    def disarm(self) -> None:
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    def read(self) -> np.ndarray | None:
        """At the step's end: each parameter's squared gradient norm (float64, the optimizer's order), or
        None when the hooks were not on for this step (or it was read already)."""
        if not self._handles or self._read:
            return None
        self._read = True
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
        squares, calls = self._squares, self._calls

        def hook(grad: Any) -> Any:
            calls[index] += 1
            if calls[index] == self._last:
                step = _flat_host(grad)
                summed = param.grad  # the earlier micro-batches' sum
                if summed is not None:
                    step = step + _flat_host(summed)
                squares[index] = float(np.dot(step, step))
            return grad

        return hook

    def _device_hook(self, index: int, param: Any) -> Any:
        from mindspore import mint

        indices, values, calls = self._indices, self._values, self._calls

        def hook(grad: Any) -> Any:
            calls[index] += 1
            if calls[index] == self._last:
                step = grad.float()
                summed = param.grad
                if summed is not None:
                    step = mint.add(step, summed.float())
                indices.append(index)
                values.append(mint.mul(step, step).sum())
            return grad

        return hook


def _flat_host(tensor: Any) -> np.ndarray:
    """A CPU tensor's values as float32: a copy through ``get_bytes`` (in a hook, ``asnumpy()`` of the fresh
    gradient costs about 25 µs more: measured on the tiny Qwen3, framework/host_values.py)."""
    values = host_copy(tensor)
    return values if values.dtype == np.float32 else values.astype(np.float32)
