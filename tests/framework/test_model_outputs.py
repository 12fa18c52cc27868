"""What the model adds to TensorBoardMonitor's logged steps and HParams (framework/model_outputs.py): model
TFLOPS per device and MFU from the step's FLOPs and time, nothing without them, the line the monitor logs
about it, and, at train begin, a plain MindSpore network's estimated FLOPs in its HParams."""

from __future__ import annotations

import mindspore  # noqa: F401  (first: its old-style *_pb2 modules fail once tensorboard's protos are loaded)
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from mindformers_tbplugin.framework.model_facts import ModelFacts
from mindformers_tbplugin.framework.model_flops import ESTIMATE, StepFlops
from mindformers_tbplugin.framework.model_outputs import ModelOutputs
from mindformers_tbplugin.framework.trainers import CLASSIC, TrainStart
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.topology import Topology


def test_a_logged_step_gets_tflops_per_device_and_mfu() -> None:
    outputs = ModelOutputs(StepFlops(8e15, ESTIMATE), {}, devices=8, peak=1000.0)
    step = StepMetrics(10, data={"train/loss": 2.0})
    outputs.add_to(step, outputs.take(10), loss_divisor=4.0, step_time_s=2.0)
    # 8 PFLOPs in 2 s over 8 devices: 500 TFLOPS each, half of a 1000 TFLOPS peak
    assert step.system == {metrics.PERF_MODEL_TFLOPS: pytest.approx(500.0), metrics.PERF_MFU: pytest.approx(0.5)}
    assert step.data == {"train/loss": 2.0}  # no loss parts: the loss is the wrapper's, untouched
    assert step.expert_load is None
    assert outputs.describe() == f"model FLOPs per step 8e+15 ({ESTIMATE})"


def test_without_flops_or_a_step_time_nothing_is_added() -> None:
    for outputs, step_time in (
        (ModelOutputs(None, {}, 8, 1000.0), 2.0),
        (ModelOutputs(StepFlops(1e15, ESTIMATE), {}, 8, None), None),
    ):
        step = StepMetrics(10)
        outputs.step_began(True, True)
        outputs.add_to(step, outputs.take(10), 1.0, step_time)
        assert step.system == {}
    assert ModelOutputs(None, {}, 8, None).describe() == "no model FLOPs"


class LegacyModel(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.num_layers, self.hidden_size = 2, 64


@pytest.mark.process  # imports MindFormers in this process, to look for an mcore model (seconds)
def test_a_plain_network_gets_the_estimate_in_its_hparams() -> None:
    network = LegacyModel()
    params = [Parameter(Tensor(np.zeros((64, 64), np.float32)), name="model.layers.0.attention.wq.weight")]
    start = TrainStart(
        trainer=CLASSIC,
        facts=ModelFacts(trainable_params=params, samples_per_step=4.0, tokens_per_sample=32),
        topology=Topology(0, 1, 1, "stand_alone", False, False),
        network=network,
        train_network=nn.WithLossCell(network, nn.MSELoss()),
        epochs=1,
        final_step=10,
        checkpoint=None,
        eval_callbacks=[],
        config=None,
        hook_args={},
        request_stop=lambda: None,
    )
    outputs = ModelOutputs.for_training(start, (10, 0), None, tapped=True)
    flops = 6 * 4 * 32 * (64 * 64 + 2 * 32 * 64)  # 128 tokens x 6 x (one 64 x 64 matrix + 2 layers x 32 x 64)
    assert outputs.flops == StepFlops(flops, ESTIMATE)
    assert outputs.hparams == {"model_flops_per_step": flops}  # no mcore model: no layer or expert counts
    assert outputs.routers is None
