"""Per-parameter squared gradient norms from gradient hooks (framework/gradient_hooks.py): the norm of the
gradient summed over a step's micro-batches, unscaled by the loss sense, on the host (CPU) and on the
device path (MindSpore ops), with hooks only on the steps that are read. The same arithmetic against
the real PyNative trainer's own grad_norm: tests/jobs/test_pynative_trainer.py."""

from __future__ import annotations

import mindspore as ms  # first: its old-style *_pb2 modules fail once tensorboard's protos are loaded
import numpy as np
import pytest
from mindspore import Tensor

from mindformers_tbplugin.framework.gradient_hooks import GradientHooks

pytestmark = pytest.mark.process  # imports MindSpore


class Handle:
    def __init__(self, hooks: list, hook: object) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        self._hooks.remove(self._hook)


class Param:
    """What autograd does with a parameter's hooks: each backward's gradient goes through them in order,
    then is added to ``grad``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.grad: Tensor | None = None
        self.hooks: list = []

    def register_hook(self, hook: object) -> Handle:
        self.hooks.append(hook)
        return Handle(self.hooks, hook)

    def backward(self, gradient: np.ndarray) -> None:
        value = Tensor(gradient.astype(np.float32))
        for hook in list(self.hooks):
            value = hook(value)
        self.grad = value if self.grad is None else Tensor(self.grad.asnumpy() + value.asnumpy())


@pytest.mark.parametrize("on_host", [True, False], ids=["host (CPU)", "device ops"])
def test_the_norm_of_the_gradient_summed_over_micro_batches_without_the_loss_sense(on_host: bool) -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = [Param("model.layers.0.w"), Param("model.head.w")]
    rng = np.random.default_rng(0)
    # two data-parallel ranks (each backward x 1/2), three micro-batches a step
    hooks = GradientHooks(params, sense=0.5, on_host=on_host, micro_batches=lambda: 3)
    for _ in range(3):
        hooks.step_began(logged=True)
        micro_batches = [[rng.normal(size=(3, 4)) for _ in params] for _ in range(3)]
        for gradients in micro_batches:
            for param, gradient in zip(params, gradients, strict=True):
                param.backward(gradient)
        squares = hooks.read()
        assert hooks.read() is None  # once per step
        summed = [sum(batch[index] for batch in micro_batches) for index in range(len(params))]
        expected = [float(np.sum(np.square(gradient))) / 0.25 for gradient in summed]
        np.testing.assert_allclose(squares, expected, rtol=1e-5)
        assert all(len(param.hooks) == 1 for param in params)  # kept while the steps are logged
        for param in params:
            param.grad = None  # the trainer's zero-grad


def test_steps_that_are_not_read_have_no_hooks() -> None:
    param = Param("w")
    hooks = GradientHooks([param], sense=1.0, on_host=True)
    param.backward(np.ones(4))
    assert hooks.read() is None and not param.hooks
    hooks.step_began(logged=True)
    assert len(param.hooks) == 1 and hooks.armed
    param.grad = None
    param.backward(np.full(4, 2.0))
    np.testing.assert_allclose(hooks.read(), [16.0])
    hooks.step_began(logged=False)  # a step that is not logged: no hook sees its backward
    assert not param.hooks and not hooks.armed
    param.grad = None
    param.backward(np.full(4, 3.0))
    assert hooks.read() is None
    hooks.step_began(logged=True)
    hooks.disarm()  # the end of training
    assert not param.hooks
