"""MoE expert load (pipeline/expert_load.py, and the aggregator in aggregation.py): the moe/* arithmetic
against hand-computed values, the sentence that names a collapsed layer's experts, and each layer's
loads averaged over the ranks that hold it (pipeline stages where a layer lives on some ranks only).
The records: test_expert_records.py; their routing on simulated ranks: test_expert_routing.py; the
alerts' culprits: tests/alerts/test_expert_culprits.py. Real trainings: tests/jobs/test_mcore_models.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fakes import MOE_ROUTERS as ROUTERS

from mindformers_tbplugin.pipeline.aggregation import ExpertLoadAggregator
from mindformers_tbplugin.pipeline.expert_load import AUX_LOSS, LoadStatistics, RouterSet

NAN = math.nan


def test_relative_loads_are_each_expert_over_its_layers_mean() -> None:
    statistics = LoadStatistics(ROUTERS)
    loads = np.array([[1.0, 1.0, 1.0, 1.0], [0.4, 0.2, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0]])
    relative = statistics.relative(loads)
    np.testing.assert_allclose(relative[0], [1, 1, 1, 1])
    np.testing.assert_allclose(relative[1], [2.0, 1.0, 1.0, 0.0])  # any scale: 0.8 in all, mean 0.2
    assert np.isnan(relative[2]).all()  # no load: a layer this rank does not hold


def test_scalars_of_raw_loads_and_their_scale_are_those_of_the_relative_loads_bit_for_bit() -> None:
    # A process's own read is scored as read (no relative matrix on the training thread): the same numbers.
    statistics = LoadStatistics(ROUTERS)
    rng = np.random.default_rng(3)
    loads = (rng.dirichlet(np.full(4, 2.0), size=3) * 4096).astype(np.float32)
    loads[1, 2] = 3.0  # under a tenth of the mean: a dead expert
    loads[2] = 0.0  # a layer without load
    bias = rng.standard_normal((3, 4)).astype(np.float32)
    scale = statistics.scale(loads)
    from_raw = statistics.scalars(loads, bias, scale)
    assert from_raw == statistics.scalars(statistics.relative(loads), bias)
    assert from_raw["moe/layers.2/dead_experts"] == 1.0 and "moe/mtp.layers.0/max_violation" not in from_raw
    np.testing.assert_array_equal(statistics.relative(loads, scale), statistics.relative(loads))


def test_moe_scalars_match_hand_computed_values() -> None:
    statistics = LoadStatistics(ROUTERS, dead_fraction=0.1)
    relative = statistics.relative(np.array([[0.25, 0.25, 0.25, 0.25], [0.5, 0.3, 0.18, 0.02], [0.1, 0.2, 0.3, 0.4]]))
    bias = np.array([[0.0, 0.0, 0.0, 0.0], [-0.003, 0.001, 0.002, 0.004], [0.01, 0.0, -0.01, 0.0]])
    values = statistics.scalars(relative, bias)
    assert values["moe/layers.1/max_violation"] == pytest.approx(0.0)
    assert values["moe/layers.2/max_violation"] == pytest.approx(0.5 / 0.25 - 1)  # MaxVio = max / mean - 1
    assert values["moe/layers.2/min_load"] == pytest.approx(0.02 / 0.25)
    assert values["moe/layers.2/dead_experts"] == 1.0  # 0.08 x the mean < 0.1
    assert values["moe/mtp.layers.0/max_violation"] == pytest.approx(0.4 / 0.25 - 1)
    assert values["moe/layers.2/bias_range"] == pytest.approx(0.007)
    assert values["moe/max_violation"] == pytest.approx(1.0)  # the worst layer's
    assert values["moe/dead_experts"] == 1.0


def test_layers_without_load_and_routers_without_bias_write_nothing() -> None:
    routers = RouterSet(("layers.0", "layers.1"), 3, 1, (AUX_LOSS, AUX_LOSS))
    statistics = LoadStatistics(routers)
    relative = statistics.relative(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    values = statistics.scalars(relative, None)
    assert set(values) == {
        "moe/layers.0/max_violation",
        "moe/layers.0/min_load",
        "moe/layers.0/dead_experts",
        "moe/max_violation",
        "moe/dead_experts",
    }
    assert statistics.scalars(statistics.relative(np.zeros((2, 3))), None) == {}


def test_a_collapse_names_its_layer_busy_and_idle_experts() -> None:
    statistics = LoadStatistics(ROUTERS, dead_fraction=0.1)
    relative = statistics.relative(np.array([[1, 1, 1, 1], [0.0, 0.01, 0.49, 0.5], [1, 1, 1, 1]], dtype=float))
    text = statistics.describe_collapse(relative, 1)
    assert text == "layers.2: experts 3, 2 took 2.00x, 1.96x the mean load; experts 0, 1 under 10% of it (0.00x, 0.04x)"
    even = statistics.relative(np.array([[1, 1, 1, 1], [0.5, 0.5, 0.0, 0.0], [1, 1, 1, 1]], dtype=float))
    assert statistics.describe_collapse(even, 1) == (
        "layers.2: experts 0, 1 took 2.00x, 2.00x the mean load; experts 2, 3 under 10% of it (0.00x, 0.00x)"
    )


# -- aggregation across ranks ------------------------------------------------------------------------
def test_the_aggregator_averages_each_layer_over_the_ranks_that_hold_it() -> None:
    aggregators = [ExpertLoadAggregator(2, 2, 3, with_bias=True) for _ in range(3)]
    own = [  # rank 2 holds only layer 1 (a later pipeline stage)
        np.array([[1.0, 1.0, 1.0], [0.5, 1.0, 1.5]]),
        np.array([[0.5, 1.0, 1.5], [1.5, 1.0, 0.5]]),
        np.array([[NAN, NAN, NAN], [1.0, 1.0, 1.0]]),
    ]
    bias = np.array([[0.1, 0.0, -0.1], [0.0, 0.0, 0.0]])
    for aggregator, relative in zip(aggregators, own, strict=True):
        aggregator.add(5, relative, bias)
    reduced = np.sum([aggregator.pack() for aggregator in aggregators], axis=0)
    assert reduced.size == aggregators[0].size == 2 * (2 * (2 * 3 + 1) + 1)
    ((step, mean, mean_bias),) = aggregators[0].unpack(reduced)
    assert step == 5
    np.testing.assert_allclose(mean[0], [0.75, 1.0, 1.25])  # ranks 0 and 1
    np.testing.assert_allclose(mean[1], [1.0, 1.0, 1.0])  # all three
    np.testing.assert_allclose(mean_bias[0], [0.1, 0.0, -0.1], rtol=1e-6)


def test_a_read_without_bias_has_no_mean_bias() -> None:
    aggregators = [ExpertLoadAggregator(2, 1, 2, with_bias=True) for _ in range(2)]
    for aggregator in aggregators:
        aggregator.add(1, np.array([[1.0, 1.0]]), np.array([[0.5, -0.5]]))
        aggregator.add(2, np.array([[0.5, 1.5]]), None)  # the bias is read once per record
    reduced = np.sum([aggregator.pack() for aggregator in aggregators], axis=0)
    first, second = aggregators[0].unpack(reduced)
    np.testing.assert_allclose(first[2], [[0.5, -0.5]])
    assert second[0] == 2 and second[2] is None
    np.testing.assert_allclose(second[1], [[0.5, 1.5]])
