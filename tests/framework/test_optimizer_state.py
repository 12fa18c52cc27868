"""Adam moment norms per group (framework/optimizer_state.py): both ways of computing them (numpy in place
on a CPU; one MindSpore norm op per moment where the moments live, on a device, run here on the CPU) give
the same squared norms; the groups and totals compose. Against TrainingStateMonitor's own values in a real
training: tests/commands/test_train.py."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import plugin_log

pytestmark = pytest.mark.process  # imports MindSpore


def _moments(prefix: str, names: list[str], seed: int) -> list:
    from mindspore import Parameter, Tensor

    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((4, 3)).astype(np.float32) for _ in names]
    return [Parameter(Tensor(value), name=f"{prefix}.{name}") for value, name in zip(values, names, strict=True)]


def test_the_device_and_host_routes_agree_and_groups_compose() -> None:
    from mindformers_tbplugin.framework import optimizer_state

    names = ["model.tok_embeddings.embedding_weight", "model.layers.0.attention.wq.weight", "lm_head.weight"]
    optimizer = SimpleNamespace(exp_avg=_moments("adam_m", names, 0), exp_avg_sq=_moments("adam_v", names, 1))
    state = optimizer_state.OptimizerState.for_optimizer(optimizer, "layer")
    host = optimizer_state._host_squares(state.first)
    device = optimizer_state._device_squares(state.first)
    np.testing.assert_allclose(host, device, rtol=1e-5)
    expected = [float(np.sum(m.asnumpy().astype(np.float64) ** 2)) for m in optimizer.exp_avg]
    np.testing.assert_allclose(host, expected, rtol=1e-6)
    tags = state.tags()
    assert set(tags) == {f"adam_{m}_norm/{g}" for m in "mv" for g in ("embedding", "layers.0", "head", "total")}
    assert math.isclose(tags["adam_m_norm/total"] ** 2, sum(expected), rel_tol=1e-6)
    assert math.isclose(tags["adam_m_norm/layers.0"] ** 2, expected[1], rel_tol=1e-6)


def test_an_optimizer_without_adam_moments_has_no_state() -> None:
    from mindformers_tbplugin.framework.optimizer_state import OptimizerState

    assert OptimizerState.for_optimizer(SimpleNamespace(moments=[]), "layer") is None
    assert OptimizerState.for_optimizer(None, "layer") is None


def test_moments_split_across_ranks_are_not_read_as_if_whole() -> None:
    """FSDP leaves the moments as distributed tensors with a Shard placement: one rank's part of each."""
    from mindformers_tbplugin.framework.optimizer_state import OptimizerState
    from mindformers_tbplugin.framework.update_norms import ParameterUpdates

    class Shard:
        pass

    class Split:
        placements = (Shard(),)
        name = "adam_m.layers.0.w"
        shape = (4,)

    optimizer = type("Optimizer", (), {"exp_avg": [Split()], "exp_avg_sq": [Split()]})()
    with plugin_log() as messages:
        assert OptimizerState.for_optimizer(optimizer, "layer") is None
        assert ParameterUpdates.for_parameters([Split()], "layer") is None
    assert any("moments are split across ranks" in m for m in messages)
    assert any("parameters are split across ranks" in m for m in messages)
