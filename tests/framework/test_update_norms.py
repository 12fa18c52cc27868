"""The step's parameter change per group (framework/update_norms.py) on host arrays changed in place,
as a CPU training's parameters are. Against a real training's parameters: tests/commands/test_train.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mindformers_tbplugin.framework.update_norms import ParameterUpdates


@dataclass
class HostParameter:
    """A parameter whose asnumpy() is a view of its memory, as MindSpore's on a CPU."""

    name: str
    value: np.ndarray
    dtype: str = "Float32"

    def asnumpy(self) -> np.ndarray:
        return self.value


def _params() -> list[HostParameter]:
    rng = np.random.default_rng(0)
    names = ["model.tok_embeddings.embedding_weight", "model.layers.0.attention.wq.weight", "lm_head.weight"]
    return [HostParameter(name, rng.standard_normal((4, 3)).astype(np.float32)) for name in names]


def test_the_change_over_a_step_per_group_and_in_total() -> None:
    params = _params()
    updates = ParameterUpdates.for_parameters(params, "layer")
    before = [p.value.copy() for p in params]
    updates.step_began(5)
    deltas = [np.full((4, 3), 0.01 * (i + 1), np.float32) for i in range(3)]
    for param, delta in zip(params, deltas, strict=True):
        param.value += delta  # in place: the copy taken at the begin must not follow
    tags = updates.tags(5)
    groups = ("embedding", "layers.0", "head", "total")
    assert set(tags) == {f"update_{kind}/{group}" for kind in ("norm", "ratio") for group in groups}
    assert math.isclose(tags["update_norm/layers.0"], float(np.linalg.norm(deltas[1])), rel_tol=1e-5)
    total = math.sqrt(sum(float(np.sum(d.astype(np.float64) ** 2)) for d in deltas))
    assert math.isclose(tags["update_norm/total"], total, rel_tol=1e-5)
    ratio = float(np.linalg.norm(deltas[2]) / np.linalg.norm(before[2]))
    assert math.isclose(tags["update_ratio/head"], ratio, rel_tol=1e-5)
    weights = math.sqrt(sum(float(np.sum(b.astype(np.float64) ** 2)) for b in before))
    assert math.isclose(tags["update_ratio/total"], total / weights, rel_tol=1e-5)


def test_nothing_without_the_steps_own_begin() -> None:
    updates = ParameterUpdates.for_parameters(_params(), "layer")
    assert updates.tags(3) == {}
    updates.step_began(3)
    assert updates.tags(4) == {}  # another step's copy is not this step's change
    assert ParameterUpdates.for_parameters([], "layer") is None
