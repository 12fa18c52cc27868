"""pipeline/histograms.py on real inputs: histograms and bounded sampling of numpy arrays and MindSpore
tensors (on the host and on the device), parameter selection, HistogramMonitor's schedule check, and
histograms written by the real writer and read back by TensorBoard's reader."""

from __future__ import annotations

import math
import re
from pathlib import Path

import mindspore  # noqa: F401  (first: its old-style *_pb2 modules fail once tensorboard's protos are loaded)
import numpy as np
import pytest
from conftest import train, write_tiny_config

from mindformers_tbplugin.pipeline import histograms
from mindformers_tbplugin.schema import ConfigError
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


def test_a_training_says_what_histograms_it_writes_and_when_none_will_come(tmp_path: Path, tiny_data: Path) -> None:
    callbacks = [
        {"type": "TensorBoardMonitor", "log_dir": str(tmp_path / "tb"), "stable_rank_every": 500},
        {"type": "HistogramMonitor", "every_steps": 500, "include": ["*attention*"]},
    ]
    run = train(write_tiny_config(tmp_path, tiny_data, callbacks, num_samples=16), tmp_path)
    assert run.returncode == 0, run.output[-4000:]
    assert re.search(r"HistogramMonitor: \d+ of \d+ trainable parameters, every 500 steps, 30 buckets", run.output)
    silent = (
        "HistogramMonitor writes nothing in this training: every_steps 500 never comes due: training ends at step 8"
    )
    assert silent in run.output
    # TensorBoardMonitor says the same of its own schedules, once, with the number that would fire.
    never = "TensorBoardMonitor: param_norm_every 100 never comes due: training ends at step 8 (set 8 or less)"
    assert run.output.count(never) == 1
    assert "stable_rank_every 500 never comes due: training ends at step 8 (set 8 or less)" in run.output
    assert "TensorBoardMonitor: stable rank of 16 weights" in run.output  # embedding, 2 layers x 7, head
