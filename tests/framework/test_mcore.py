"""What a monitor reads from a real MindFormers TransformerConfig (framework/mcore.py): the HParams whatever
the YAML spelling (layers, heads, experts, the router, multi-token prediction), no loss parts or routers
for a dense model, and MindFormers' FLOPs formula run on a copy of the config. Every test imports
MindFormers in this process (seconds; it logs under ./output): they are marked ``process``. Models built
and trained for real are in tests/jobs/test_mcore_models.py."""

from __future__ import annotations

import copy
from typing import Any

import mindspore  # noqa: F401  (first: its old-style *_pb2 modules fail once tensorboard's protos are loaded)
import pytest
from conftest import plugin_log
from mindspore import nn

from mindformers_tbplugin.framework import mcore
from mindformers_tbplugin.framework.mcore import McoreModel

pytestmark = pytest.mark.process

TINY = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32, "vocab_size": 256}


def transformer_config(**changes: Any) -> Any:
    from mindformers.parallel_core.transformer_config import TransformerConfig

    return TransformerConfig(**TINY, ffn_hidden_size=128, **changes)


def deepseek_like() -> Any:
    """4 routed experts (top-2) behind a sigmoid router with expert bias, a shared expert, one MTP layer."""
    return transformer_config(
        num_moe_experts=4,
        moe_router_topk=2,
        moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=0.001,
        moe_ffn_hidden_size=32,
        shared_expert_num=1,
        mtp_num_layers=1,
        add_bias_linear=False,
    )


def test_the_hparams_of_a_moe_model_with_multi_token_prediction() -> None:
    model = McoreModel(deepseek_like(), None, None)
    assert model.is_moe and model.mtp_depth == 1
    assert mcore.model_hparams(model) == {
        "num_layers": 2,
        "num_heads": 4,
        "num_experts": 4,
        "moe_top_k": 2,
        "num_shared_experts": 1,
        "router": "sigmoid + expert bias, seq_aux_loss",
        "moe_aux_loss_coeff": 0.001,
        "mtp_depth": 1,
    }


def test_a_dense_model_has_layers_and_heads_and_no_loss_parts_or_routers() -> None:
    model = McoreModel(transformer_config(), None, nn.Dense(2, 2))
    assert not model.is_moe and model.mtp_depth == 0
    assert mcore.model_hparams(model) == {"num_layers": 2, "num_heads": 4}
    # MindFormers never resets a dense model's lm_loss: a running sum, not a loss.
    assert mcore.loss_parts(model) == []
    assert mcore.routers(model) == ([], None)


def test_the_flops_formula_runs_on_a_copy_of_the_config() -> None:
    from mindformers.models.utils import convert_transformer_config_to_args_for_tflops, num_floating_point_operations

    config = deepseek_like()
    before = dict(vars(config))
    flops = mcore.flops_per_step(McoreModel(config, None, None), 8)
    assert dict(vars(config)) == before  # MindFormers' converter sets attributes on the config it is given
    assert flops == num_floating_point_operations(convert_transformer_config_to_args_for_tflops(copy.copy(config)), 8)
    assert mcore.flops_per_step(McoreModel(config, None, None), 16) == pytest.approx(2 * flops)  # linear in batch


def test_a_network_that_is_no_mcore_model_is_none() -> None:
    assert mcore.find_mcore_model(None) is None
    assert mcore.find_mcore_model(nn.WithLossCell(nn.Dense(2, 2), nn.MSELoss())) is None


class _UnknownLayout(nn.Cell):
    """A model that offers MindFormers' mcore accessors but whose config cannot be read the mcore way (a
    user's own model class on MindFormers' base, or a release that changed the layout)."""

    def get_gpt_model(self) -> nn.Cell:
        return self

    def get_gpt_transformer_config(self) -> Any:
        raise AttributeError("'UnknownConfig' object has no attribute 'num_layers'")


def test_a_layout_we_do_not_know_gets_one_warning_naming_it_and_no_mcore_model() -> None:
    with plugin_log() as messages:
        found = mcore.find_mcore_model(nn.WithLossCell(_UnknownLayout(), nn.MSELoss()))
    assert found is None  # the monitor carries on with what every model has
    (warning,) = messages
    assert "_UnknownLayout looks like an mcore model" in warning and "no attribute 'num_layers'" in warning
