"""This rank's own loss from the model's forward (framework/local_loss.py): a real MindSpore Cell's forward
hook, the mean over a step's micro-batches, only on the steps that are read, and the output shapes the
PyNative trainer's ``compute_loss`` takes the loss from. Against the trainer's all-reduced loss in a
2-rank job: tests/jobs/test_pynative_trainer.py."""

from __future__ import annotations

import mindspore as ms  # first: its old-style *_pb2 modules fail once tensorboard's protos are loaded
import numpy as np
import pytest
from mindspore import Tensor, nn

from mindformers_tbplugin.framework.local_loss import LocalLoss

pytestmark = pytest.mark.process  # imports MindSpore


class Model(nn.Cell):
    def __init__(self, shape: str) -> None:
        super().__init__()
        self.shape = shape

    def construct(self, x: Tensor) -> object:
        loss = (x * x).mean().reshape((1,))
        if self.shape == "dict":
            return {"loss": loss, "logits": x}
        if self.shape == "tuple":
            return (loss, x)
        return x if self.shape == "logits" else loss


@pytest.mark.parametrize("shape", ["tensor", "dict", "tuple"])
def test_the_mean_of_a_steps_micro_batch_losses(shape: str) -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    model = Model(shape)
    local = LocalLoss(model)
    batches = [np.full((2, 3), value, np.float32) for value in (1.0, 2.0, 3.0)]
    model(Tensor(batches[0]))
    assert local.read() is None  # not armed: nothing read
    local.arm()
    for batch in batches:
        model(Tensor(batch))
    assert local.read() == pytest.approx((1.0 + 4.0 + 9.0) / 3)
    local.arm()
    model(Tensor(batches[1]))
    assert local.read() == pytest.approx(4.0)  # one micro-batch: its own
    model(Tensor(batches[2]))
    assert local.read() is None  # the hook is off again


def test_a_forward_that_returns_no_loss_is_said_once_and_not_read_again() -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    model = Model("logits")
    local = LocalLoss(model)
    local.arm()
    model(Tensor(np.ones((2, 3), np.float32)))
    assert local.read() is None
    assert local.unreadable == "the model's forward returns Tensor, not a one-value loss"
    local.arm()  # no hook any more
    model(Tensor(np.ones((2, 3), np.float32)))
    assert local.read() is None
