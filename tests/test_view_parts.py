"""The pieces behind the views, each on real inputs: histograms and sampling (numpy and MindSpore
tensors), the eval-result mapping, secret masking, the cell graph of a real MindSpore network, and
histograms written by the real writer and read back by TensorBoard's reader."""

from __future__ import annotations

import math
from pathlib import Path

import mindspore  # noqa: F401  (first: its old-style *_pb2 modules fail once tensorboard's protos are loaded)
import numpy as np
import pytest
from conftest import plugin_log

from mindformers_tbplugin.config.schema import ConfigError
from mindformers_tbplugin.framework import eval_hook, run_description, running_config
from mindformers_tbplugin.framework.model_facts import ModelFacts
from mindformers_tbplugin.pipeline import histograms
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.tfevents import events
from mindformers_tbplugin.tfevents.writer import RunWriter


def test_histogram_counts_every_value_between_min_and_max() -> None:
    values = np.random.default_rng(0).normal(size=10_000).astype(np.float32)
    result = histograms.histogram(values, bins=30)
    assert result.stats["num"] == 10_000 and sum(result.counts) == 10_000
    assert result.stats["min"] == float(values.min()) and result.limits[-1] == pytest.approx(float(values.max()))
    assert result.stats["sum"] == pytest.approx(float(values.astype(np.float64).sum()))
    assert result.stats["sum_squares"] == pytest.approx(float((values.astype(np.float64) ** 2).sum()))
    expected, _ = np.histogram(values.astype(np.float64), bins=30)
    assert result.counts == expected.tolist()


def test_histogram_of_constant_and_non_finite_values() -> None:
    constant = histograms.histogram(np.ones(50), bins=30)
    assert (constant.limits, constant.counts) == ([1.0], [50.0])
    mixed = histograms.histogram(np.array([1.0, np.nan, np.inf, 3.0]), bins=2)
    assert mixed.stats["num"] == 2 and mixed.counts == [1.0, 1.0]
    assert histograms.histogram(np.array([np.nan]), bins=2) is None


@pytest.mark.parametrize("shape", [(4096, 4096), (151_936, 896), (1000, 1000), (64,)])
def test_sample_is_bounded_and_walks_through_every_column(shape: tuple[int, ...]) -> None:
    array = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    sample = histograms.sampled_values(array, max_elements=65_536)
    assert sample.size <= 65_536
    if array.size <= 65_536:
        assert sample.size == array.size
    elif len(shape) == 2:
        columns = np.unique(sample.astype(np.int64) % shape[1])
        assert columns.size >= min(shape[1], sample.size) * 0.99


def test_sample_on_the_device_equals_the_host_sample() -> None:
    from mindspore import Tensor

    array = np.random.default_rng(1).normal(size=(300, 128)).astype(np.float32)
    host = histograms.sampled_values(Tensor(array), max_elements=1000)
    device = histograms.sampled_values(Tensor(array), max_elements=1000, on_device=True)
    np.testing.assert_array_equal(host, device)
    assert host.size <= 1000


def test_select_names_by_include_then_exclude() -> None:
    names = ["model.layers.0.attention.wq.weight", "model.layers.0.ffn_norm.weight", "lm_head.weight"]
    assert histograms.select_names(names, None, None) == names
    assert histograms.select_names(names, ["*layers.0.*"], ["*norm*"]) == names[:1]


def test_histogram_monitor_needs_a_schedule() -> None:
    from mindformers_tbplugin.callbacks import HistogramMonitor

    with pytest.raises(ConfigError, match="every_steps and every_epochs are both 0"):
        HistogramMonitor(every_steps=0, every_epochs=0)
    with pytest.raises(ConfigError, match="bins"):
        HistogramMonitor(bins=1)


def test_written_histograms_read_back_by_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, EventAccumulator

    writer = RunWriter(tmp_path / "run")
    values = np.linspace(-1, 1, 1001)
    for step in (10, 20):
        result = histograms.histogram(values * step, bins=20)
        writer.add_histogram(step, "params/w", result.stats, result.limits, result.counts)
    writer.close()
    accumulator = EventAccumulator(str(tmp_path / "run"), size_guidance={HISTOGRAMS: 0})
    accumulator.Reload()
    events = accumulator.Histograms("params/w")
    assert [e.step for e in events] == [10, 20]
    assert events[1].histogram_value.max == pytest.approx(20.0) and sum(events[1].histogram_value.bucket) == 1001


def test_a_failing_record_builder_costs_only_its_record(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def broken(step: int, wall_time: float) -> None:
        raise ValueError("bad record")

    writer = RunWriter(tmp_path / "run")
    with plugin_log() as messages:
        writer.add_built(1, broken)
        writer.add_scalars(2, {"train/loss": 1.5})
        writer.close()
    assert any("bad record" in m for m in messages)
    accumulator = EventAccumulator(str(tmp_path / "run"))
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("train/loss")] == [(2, 1.5)]


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


def test_secret_looking_keys_are_masked_and_token_ids_are_not() -> None:
    config = {
        "hf_token": "abc",
        "remote": {"password": "p", "AK": "x", "sk": "y", "secret_key": "z", "credentials": {"user": "u"}},
        "model": {"pad_token_id": 0, "tokenizer": {"type": "LlamaTokenizer"}, "num_key_value_heads": 2},
        "empty_token": "",
    }
    masked = running_config.plain(config)
    assert masked["hf_token"] == masked["remote"]["password"] == running_config.MASK
    assert {masked["remote"][k] for k in ("AK", "sk", "secret_key", "credentials")} == {running_config.MASK}
    assert masked["model"] == config["model"]
    assert masked["empty_token"] == ""


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
