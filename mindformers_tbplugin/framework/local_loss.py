"""This rank's own loss of a step, for MindFormers 2.x's PyNative trainer.

That trainer averages the loss over every rank (an all-reduce on the loss tensor itself) before its
callbacks see it, so the loss it hands them is the same on every rank. A forward hook on the model
reads the loss each micro-batch's forward returns (what the trainer's ``compute_loss`` takes: the
output's ``loss``, the output itself, or its first element), and a step's loss is their mean, the
value the trainer averages. The hook is registered only for the steps that are read (:meth:`arm` at
a logged step's begin, removed by :meth:`read`). Under pipeline parallelism the model part a rank
holds does not return the loss: there is nothing to read (the trainer's averaged loss is used).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mindformers_tbplugin.framework.host_values import host_copy


class LocalLoss:
    def __init__(self, model: Any) -> None:
        """``model``: the one model part (a Cell) whose forward returns the loss."""
        self._model = model
        self._handle: Any = None
        self._losses: list[Any] = []
        self.unreadable: str | None = None  # why an output was not a loss, once seen

    def arm(self) -> None:
        """At the begin of a step that will be read."""
        self.disarm()
        self._losses = []
        if self.unreadable is None:
            self._handle = self._model.register_forward_hook(self._forward_done)

    def disarm(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

    def read(self) -> float | None:
        """At the step's end: the mean of the step's micro-batch losses, or None (not armed, none seen)."""
        if self._handle is None:
            return None
        self.disarm()
        losses, self._losses = self._losses, []
        if not losses:
            return None
        if len(losses) == 1:
            return float(host_copy(losses[0])[0])
        from mindspore import ops

        return float(np.mean(host_copy(ops.stack([loss.reshape(()) for loss in losses])), dtype=np.float64))

    def _forward_done(self, cell: Any, inputs: Any, output: Any) -> None:
        loss = _loss_of(output)
        if loss is None or int(np.prod(loss.shape)) != 1:
            self.unreadable = f"the model's forward returns {type(output).__name__}, not a one-value loss"
            return
        self._losses.append(loss)


def _loss_of(output: Any) -> Any:
    """The loss in a model's output, as the trainer's ``compute_loss`` finds it."""
    if isinstance(output, dict):
        output = output.get("loss")
    elif isinstance(output, (tuple, list)):
        output = output[0] if output else None
    to_local = getattr(output, "to_local", None)  # a DTensor: this rank's value
    if callable(to_local):
        output = to_local()
    return output if hasattr(output, "shape") and hasattr(output, "asnumpy") else None
