"""What a run says about itself, each on real inputs (framework/run_description.py, eval_hook.py): HParams
values and their column types, the cell graph and parameter table of a real MindSpore network, and
evaluation results mapped to eval/ tags."""

from __future__ import annotations

import math

import mindspore  # noqa: F401  (first: its old-style *_pb2 modules fail once tensorboard's protos are loaded)
import pytest

from mindformers_tbplugin.framework import eval_hook, run_description, running_config
from mindformers_tbplugin.framework.model_facts import ModelFacts
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.tfevents import events


def test_eval_results_become_eval_tags() -> None:
    assert eval_hook.eval_scalars({"PerplexityMetric": {"loss": 2.0, "PPL": 7.389}}) == {
        "eval/loss": 2.0,
        "eval/perplexity": 7.389,
    }
    derived = eval_hook.eval_scalars({"eval_loss": 1.0, "Accuracy": 0.5, "EmF1Metric": {"Em": 0.25, "F1": 0.5}})
    assert derived == {
        "eval/loss": 1.0,
        "eval/accuracy": 0.5,
        "eval/emf1metric/em": 0.25,
        "eval/emf1metric/f1": 0.5,
        "eval/perplexity": pytest.approx(math.e),
    }
    assert eval_hook.eval_scalars({"m": {"text": "not a number", "nan": float("nan")}}) == {}
    assert eval_hook.eval_scalars(None) == {}


def test_cell_graph_and_parameter_table_of_a_real_network() -> None:
    from mindspore import nn

    class Block(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Dense(8, 4)
            self.norm = nn.LayerNorm((4,))
            self.norm.gamma.requires_grad = False

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.CellList([Block(), Block()])
            self.head = nn.Dense(4, 2, has_bias=False)

    class Wrapper(nn.Cell):
        def __init__(self, network: nn.Cell) -> None:
            super().__init__()
            self.network = network

    cells = run_description.describe_cells(run_description.unwrap_model(Wrapper(Net())))
    by_path = {cell.path: cell for cell in cells}
    assert by_path[""].type == "Net" and by_path[""].total == 2 * (8 * 4 + 4 + 4 + 4) + 8
    assert by_path[""].trainable == by_path[""].total - 2 * 4
    assert by_path["blocks.0"].total == 44 and by_path["blocks.0.dense"].params[0].shape == (4, 8)
    graph = events.graph_def(cells)
    nodes = {node.name: node for node in graph.node}
    dense = nodes["Net/blocks/1/dense/Dense"]
    assert list(dense.input) == ["Net/blocks/1/dense/weight", "Net/blocks/1/dense/bias"]
    weight = nodes["Net/blocks/1/dense/weight"]
    assert [d.size for d in weight.attr["shape"].shape.dim] == [4, 8] and weight.attr["count"].i == 32
    table = run_description.parameter_table(cells)
    assert "| `blocks` | CellList | 88 | 80 |" in table and "| `head` | Dense | 8 | 8 |" in table


def test_hparams_from_a_config_take_their_column_types() -> None:
    config = {
        "seed": 7,
        "use_parallel": True,
        "optimizer": {"type": "AdamW", "learning_rate": "3e-4", "weight_decay": 0.1},
        "model": {"arch": {"type": "LlamaForCausalLM"}, "model_config": {"num_layers": {"nested": 1}}},
        "parallel_config": {"data_parallel": 4, "pipeline_stage": 2},
        "runner_config": {"epochs": 3, "gradient_accumulation_steps": 2},
    }
    facts = ModelFacts(samples_per_step=16.0, tokens_per_sample=4096)
    topology = Topology(
        rank=0,
        world_size=8,
        pipeline_stages=2,
        parallel_mode="semi_auto_parallel",
        full_batch=False,
        communicating=True,
    )
    values = run_description.hparam_values(
        running_config.RunningConfig(config, None), facts, topology, "exp", 1000, None
    )
    assert values == {
        "experiment": "exp",
        "world_size": 8,
        "data_parallel_replicas": 4,
        "batch_size": 4,  # 16 samples per step over 4 data-parallel ranks
        "global_batch_size": 32,  # x 2 accumulation steps
        "seq_length": 4096,
        "parameters": 1000,
        "learning_rate": pytest.approx(3e-4),  # YAML 1.1 reads 3e-4 as a string: still a number here
        "optimizer": "AdamW",
        "weight_decay": pytest.approx(0.1),
        "epochs": 3,
        "gradient_accumulation_steps": 2,
        "model_type": "LlamaForCausalLM",
        "data_parallel": 4,
        "pipeline_stage": 2,
        "use_parallel": True,
        "seed": 7,
    }
