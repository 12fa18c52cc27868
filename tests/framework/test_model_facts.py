"""What a callback finds by itself about the model and data (framework/model_facts.py), from real MindSpore
objects as ``Model.train`` hands them over: the optimizer and its parameters, the initial step of a
resumed run, samples per step from the dataset's batch and the data-parallel ranks, attributes found
through wrapper cells, and the pipeline's micro-batch divisor of the loss."""

from __future__ import annotations

import mindspore  # noqa: F401  (first: its old-style *_pb2 modules fail once tensorboard's protos are loaded)
import numpy as np
from mindspore import Tensor, nn
from mindspore import dataset as ds
from mindspore.train.callback._callback import InternalCallbackParam

from mindformers_tbplugin.framework.model_facts import find_attribute, loss_scale_for_pipeline, read_model_facts
from mindformers_tbplugin.pipeline.topology import Topology


class Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Dense(4, 2)
        self.norm = nn.LayerNorm((2,))
        self.norm.beta.requires_grad = False
        self.num_layers = 3  # as a legacy MindFormers model holds it


def training_cell(network: nn.Cell) -> tuple[nn.Cell, nn.Optimizer]:
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.1, momentum=0.9)
    return nn.TrainOneStepCell(nn.WithLossCell(network, nn.MSELoss()), optimizer), optimizer


def dataset(batch: int) -> ds.Dataset:
    rows = [(np.zeros(4, np.float32), np.zeros(2, np.float32))] * 16
    return ds.GeneratorDataset(rows, ["x", "y"], shuffle=False).batch(batch)


def topology(world_size: int, full_batch: bool = False, pipeline_stages: int = 1) -> Topology:
    return Topology(0, world_size, pipeline_stages, "data_parallel", full_batch, world_size > 1)


def test_a_resumed_training_starts_from_the_optimizers_step_and_counts_every_ranks_batch() -> None:
    network = Net()
    train_network, optimizer = training_cell(network)
    optimizer.global_step.set_data(Tensor(np.array([120], np.int32)))  # what a checkpoint of step 120 loads
    params = InternalCallbackParam()
    params.train_network, params.network, params.train_dataset = train_network, network, dataset(4)
    params.initial_step = 100  # the trainer's own count may lag behind the optimizer's
    facts = read_model_facts(params, topology(8))
    assert facts.optimizer is optimizer  # found on the training cell: Model.train hands it over there
    assert [p.name for p in facts.trainable_params] == ["dense.weight", "dense.bias", "norm.gamma"]
    assert facts.initial_global_step == 120
    assert facts.samples_per_step == 32.0  # a batch of 4 on each of 8 data-parallel ranks
    assert facts.tokens_per_sample is None  # no cell with a config's seq_length
    assert read_model_facts(params, topology(8, full_batch=True)).samples_per_step == 4.0  # one batch for all


def test_a_fresh_training_starts_from_the_trainers_initial_step() -> None:
    network = Net()
    _, optimizer = training_cell(network)
    params = InternalCallbackParam()
    params.network, params.optimizer, params.initial_step = network, optimizer, 50
    facts = read_model_facts(params, topology(1))
    assert facts.initial_global_step == 50  # the optimizer's step is still 0
    assert facts.samples_per_step is None  # no dataset handed over


def test_without_an_optimizer_the_networks_trainable_parameters() -> None:
    params = InternalCallbackParam()
    params.network = Net()
    facts = read_model_facts(params, topology(1))
    assert facts.optimizer is None and facts.initial_global_step == 0
    assert [p.name for p in facts.trainable_params] == ["dense.weight", "dense.bias", "norm.gamma"]


def test_attributes_are_found_through_the_wrapper_cells() -> None:
    train_network, _ = training_cell(Net())
    assert find_attribute(train_network, "num_layers") == 3  # TrainOneStepCell.network._backbone
    assert find_attribute(train_network, "hidden_size") is None


def test_the_loss_is_divided_by_the_micro_batches_only_under_pipeline_parallelism() -> None:
    pipelined = nn.PipelineCell(nn.WithLossCell(Net(), nn.MSELoss()), micro_size=4)
    assert loss_scale_for_pipeline(topology(8, pipeline_stages=2), pipelined) == 4.0
    assert loss_scale_for_pipeline(topology(8), pipelined) == 1.0  # no pipeline stages: no micro-batch sum
    single = nn.PipelineCell(nn.WithLossCell(Net(), nn.MSELoss()), micro_size=1)
    assert loss_scale_for_pipeline(topology(8, pipeline_stages=2), single) == 1.0
