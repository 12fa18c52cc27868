"""Stable rank of chosen weights (framework/stable_rank.py) on host arrays changed in place, as a CPU
training's parameters are, against numpy's exact singular values. Against MindFormers' own
``_get_stable_rank`` on a real training's weights: tests/commands/test_train.py."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest

from mindformers_tbplugin.framework import stable_rank
from mindformers_tbplugin.framework.stable_rank import StableRanks, largest_eigenvalue


@dataclass
class HostParameter:
    """A parameter whose asnumpy() is a view of its memory, as MindSpore's on a CPU."""

    name: str
    value: np.ndarray
    dtype: str = "Float32"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    def asnumpy(self) -> np.ndarray:
        return self.value


def _exact(matrix: np.ndarray) -> tuple[float, float]:
    """(stable rank, largest eigenvalue of WᵀW) from the singular values."""
    singular = np.linalg.svd(matrix.astype(np.float64), compute_uv=False)
    return float(np.sum(singular**2) / singular[0] ** 2), float(singular[0] ** 2)


def _low_rank(rng: np.random.Generator, shape: tuple[int, int], rank: int) -> np.ndarray:
    return (rng.standard_normal((shape[0], rank)) @ rng.standard_normal((rank, shape[1]))).astype(np.float32)


def _computed(ranks: StableRanks, step: int) -> dict[str, float]:
    delivered: dict[int, dict[str, float]] = {}
    done = threading.Event()

    def deliver(at: int, values: dict[str, float]) -> None:
        delivered[at] = values
        done.set()

    ranks.measure(step, deliver)
    assert done.wait(30)
    return delivered[step]


def test_matrices_and_expert_stacks_match_the_singular_values() -> None:
    rng = np.random.default_rng(0)
    params = [
        HostParameter("model.layers.0.attention.wq.weight", _low_rank(rng, (48, 32), 3)),
        HostParameter("model.layers.0.feed_forward.w1.weight", rng.standard_normal((64, 32)).astype(np.float32)),
        HostParameter("model.layers.0.moe.experts.w1", np.stack([_low_rank(rng, (16, 24), r) for r in (1, 2, 4)])),
        HostParameter("model.layers.0.attention_norm.weight", np.ones(32, np.float32)),  # 1-D: never chosen
    ]
    ranks = StableRanks.for_parameters(params, [".*"], "all")
    assert [p.name for p in ranks.params] == [p.name for p in params[:3]]
    values = _computed(ranks, 10)
    for param in params[:2]:
        stable_rank, eigenvalue = _exact(param.value)
        assert values[f"weight_eigenvalue/{param.name}"] == pytest.approx(eigenvalue, rel=1e-3)
        assert values[f"weight_stable_rank/{param.name}"] == pytest.approx(stable_rank, rel=1e-3)
    experts = [_exact(matrix) for matrix in params[2].value]
    tag = "weight_stable_rank/model.layers.0.moe.experts.w1"
    for index, (stable_rank, _) in enumerate(experts):
        assert values[f"{tag}/expert_{index}"] == pytest.approx(stable_rank, rel=1e-3)
    assert values[f"{tag}/expert_max"] == pytest.approx(max(r for r, _ in experts), rel=1e-3)
    assert values[f"{tag}/expert_min"] == pytest.approx(min(r for r, _ in experts), rel=1e-3)
    assert values[f"{tag}/expert_mean"] == pytest.approx(np.mean([r for r, _ in experts]), rel=1e-3)
    eigenvalue_tag = "weight_eigenvalue/model.layers.0.moe.experts.w1"
    assert values[f"{eigenvalue_tag}/expert_max"] == pytest.approx(max(e for _, e in experts), rel=1e-3)
    assert ranks.close(5)


def test_the_copy_is_the_due_steps_weights_and_the_vector_carries_over(monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[np.ndarray | None] = []

    def recording(matrix: np.ndarray, start: np.ndarray | None) -> tuple[float, np.ndarray | None]:
        starts.append(None if start is None else start.copy())
        return largest_eigenvalue(matrix, start)  # the real computation, only watched

    monkeypatch.setattr(stable_rank, "largest_eigenvalue", recording)
    rng = np.random.default_rng(1)
    param = HostParameter("decoder.layers.1.mlp.linear_fc1.weight", rng.standard_normal((40, 40)).astype(np.float32))
    ranks = StableRanks.for_parameters([param], ["linear_fc"], "statistics")
    first = _computed(ranks, 5)
    assert first[f"weight_stable_rank/{param.name}"] == pytest.approx(_exact(param.value)[0], rel=1e-3)
    param.value *= 2.0  # in place, as the next step changes a CPU parameter
    second = _computed(ranks, 10)
    assert second[f"weight_eigenvalue/{param.name}"] == pytest.approx(4 * first[f"weight_eigenvalue/{param.name}"])
    assert second[f"weight_stable_rank/{param.name}"] == pytest.approx(first[f"weight_stable_rank/{param.name}"])
    # the first due step starts from nothing, the second from the first's top (left: a square matrix)
    # singular vector
    assert starts[0] is None and starts[1] is not None
    top = np.linalg.svd(param.value.astype(np.float64))[0][:, 0]
    assert abs(float(np.dot(starts[1], top))) == pytest.approx(1.0, abs=1e-4)
    ranks.close(5)


@pytest.mark.parametrize("shape", [(300, 120), (120, 300)])
def test_a_wide_or_tall_matrix_iterates_and_restarts_from_its_vector(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(2)
    matrix = rng.standard_normal(shape).astype(np.float32)  # random: the top singular values are close
    eigenvalue, vector = largest_eigenvalue(matrix, None)
    assert vector is not None and vector.shape == (min(shape),)
    assert eigenvalue == pytest.approx(_exact(matrix)[1], rel=1e-5)
    again, _ = largest_eigenvalue(matrix * 1.001, vector)
    assert again == pytest.approx(eigenvalue * 1.001**2, rel=1e-5)


def test_patterns_choose_by_search_and_a_zero_matrix_has_rank_zero() -> None:
    params = [
        HostParameter("model.layers.0.attention.wq.weight", np.zeros((80, 70), np.float32)),
        HostParameter("model.tok_embeddings.embedding_weight", np.eye(8, dtype=np.float32)),
    ]
    ranks = StableRanks.for_parameters(params, [r"attention\.wq"], "statistics")
    assert [p.name for p in ranks.params] == ["model.layers.0.attention.wq.weight"]
    values = _computed(ranks, 1)
    assert values == {
        "weight_stable_rank/model.layers.0.attention.wq.weight": 0.0,
        "weight_eigenvalue/model.layers.0.attention.wq.weight": 0.0,
    }
    assert StableRanks.for_parameters(params, ["nothing_matches"], "statistics") is None
    ranks.close(5)


def test_busy_while_computing_and_close_says_whether_it_finished() -> None:
    release = threading.Event()
    param = HostParameter("w", np.eye(4, dtype=np.float32))
    ranks = StableRanks.for_parameters([param], [".*"], "statistics")
    assert ranks.measure(1, lambda step, values: release.wait(30))
    assert ranks.busy()
    assert not ranks.measure(2, lambda step, values: None)  # nothing copied while step 1's runs
    assert not ranks.close(0.05)
    release.set()
    assert ranks.close(5)
