"""What MindFormers 2.x's PyNative mcore models accumulate per step (framework/pynative_accumulators.py): the
trackers' loss parts as contributions to the objective, per MoE layer too, over the step's micro-batches,
and each MoE layer's token counts; a mixture-of-experts model whose layers hold no counts is said once.
Against a real training's trackers and LossCallback's printed values: tests/jobs/test_pynative_trainer.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import plugin_log

from mindformers_tbplugin.framework import pynative_accumulators
from mindformers_tbplugin.framework.mcore import McoreModel


class Values:
    """A tracker's ``values`` tensor (what host_reader reads)."""

    def __init__(self, values: list[float]) -> None:
        self.values = np.array(values, dtype=np.float32)
        self.shape = self.values.shape

    def asnumpy(self) -> np.ndarray:
        return self.values


def _model(cells: list[tuple[str, object]], **config: object) -> McoreModel:
    defaults = {"num_layers": 3, "num_moe_experts": 4, "moe_router_topk": 2, "moe_aux_loss_coeff": 1e-3}
    model = SimpleNamespace(cells_and_names=lambda: iter(cells))
    return McoreModel(SimpleNamespace(**{**defaults, **config}), model, SimpleNamespace())


def _moe_layer(number: int, bias: bool = True) -> SimpleNamespace:
    counts = Values([1.0, 2.0, 3.0, 4.0])
    return SimpleNamespace(
        tokens_per_expert=counts,
        expert_bias=Values([0.0] * 4) if bias else None,
        router=SimpleNamespace(is_hash_layer=False),
        layer_number=number,
    )


def test_the_trackers_become_contributions_over_the_steps_micro_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    layers = [("decoder.layers.1.mlp", _moe_layer(1)), ("decoder.layers.2.mlp", _moe_layer(2))]
    layers.append(("mtp.layers.0.transformer_layer.mlp", _moe_layer(3)))
    mcore = _model(layers, mtp_num_layers=1, mtp_loss_scaling_factor=0.3)
    trackers = {
        "get_moe_layer_wise_logging_tracker": {"values": Values([0.0, 2.0, 4.0, 6.0])},  # aux / coefficient, summed
        "get_mtp_layer_wise_logging_tracker": {"values": Values([5.0])},  # already x the MTP factor, summed
    }
    monkeypatch.setattr(pynative_accumulators, "resolve", lambda name: lambda: trackers[name])
    parts = pynative_accumulators.loss_parts(mcore, lambda: 2)  # two micro-batches
    contributions = parts.contributions(parts.read())
    assert contributions == pytest.approx(
        {
            "train/loss_aux": 1e-3 * 12.0 / 2,
            "loss_aux/layers.1": 1e-3 * 2.0 / 2,
            "loss_aux/layers.2": 1e-3 * 4.0 / 2,
            "loss_aux/mtp.layers.0": 1e-3 * 6.0 / 2,
            "train/loss_mtp": 5.0 / 2,
        }
    )
    assert parts.count == len(contributions)
    trackers["get_mtp_layer_wise_logging_tracker"] = {}  # before the first forward creates it
    assert parts.contributions(parts.read())["train/loss_mtp"] == 0.0


def test_routers_with_and_without_expert_bias_and_a_model_whose_layers_hold_no_counts() -> None:
    layers = [
        ("decoder.layers.0.mlp", _moe_layer(0, bias=False)),
        ("mtp.layers.0.transformer_layer.mlp", _moe_layer(2)),
    ]
    found, routers = pynative_accumulators.routers(_model(layers))
    assert routers.groups == ("layers.0", "mtp.layers.0")
    assert routers.kinds == ("aux_loss", "expert_bias") and routers.experts == 4 and routers.top_k == 2
    assert found[0].load is layers[0][1].tokens_per_expert
    with plugin_log() as messages:
        assert pynative_accumulators.routers(_model([("decoder.layers.0.mlp", SimpleNamespace())])) == ([], None)
    assert any(
        "is a mixture-of-experts model, but none of its layers holds per-expert token counts" in m for m in messages
    )
    assert pynative_accumulators.routers(_model([], num_moe_experts=None)) == ([], None)  # dense: nothing to say
