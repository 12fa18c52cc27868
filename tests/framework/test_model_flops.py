"""The model FLOPs of a step (framework/model_flops.py): MindFormers' own formula for an mcore model, the
estimate for the others (the matrices of a legacy model's parameters, embeddings and vectors aside; an
mcore MoE model's routed experts at top-k over experts), nothing without a batch or the model's shape,
and the estimate beside MindFormers' formula on real tiny mcore models (a dense Qwen3, where both count
the same work, and a DeepSeek-V3 with MoE and MTP)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import mindspore  # noqa: F401  (first: its old-style *_pb2 modules fail once tensorboard's protos are loaded)
import numpy as np
import pytest
from conftest import BUILD_MCORE_MODELS, printed_json
from mindspore import Parameter, Tensor, nn

from mindformers_tbplugin.framework.mcore import McoreModel
from mindformers_tbplugin.framework.model_flops import (
    ESTIMATE,
    MINDFORMERS_FORMULA,
    StepFlops,
    estimated_flops,
    step_flops,
)


def parameters(shapes: dict[str, tuple[int, ...]]) -> list[Parameter]:
    return [Parameter(Tensor(np.zeros(shape, np.float32)), name=name) for name, shape in shapes.items()]


class LegacyModel(nn.Cell):
    """Where a legacy MindFormers model keeps its shape: attributes of a cell inside the training cell."""

    def __init__(self, num_layers: int | None, hidden_size: int | None) -> None:
        super().__init__()
        self.num_layers, self.hidden_size = num_layers, hidden_size


LEGACY = {
    "model.tok_embeddings.embedding_weight": (256, 64),  # an embedding: a lookup, no matrix product
    "model.layers.0.attention.wq.weight": (64, 64),
    "model.layers.0.attention_norm.weight": (64,),  # a vector
    "model.layers.1.feed_forward.w1.weight": (128, 64),
    "lm_head.weight": (256, 64),
}


def test_a_legacy_model_is_estimated_from_its_matrices_and_cells() -> None:
    network = nn.WithLossCell(LegacyModel(num_layers=2, hidden_size=64), nn.MSELoss())
    found = step_flops(None, network, parameters(LEGACY), 4, 32)
    # 4 x 32 tokens x 6 x (64*64 + 128*64 + 256*64 matrix elements + 2 layers x 32 positions x width 64)
    assert found == StepFlops(6 * 128 * (4096 + 8192 + 16384 + 2 * 32 * 64), ESTIMATE)


def test_no_flops_without_a_batch_or_the_models_shape() -> None:
    network = LegacyModel(num_layers=2, hidden_size=64)
    assert step_flops(None, network, parameters(LEGACY), None, 32) is None
    assert step_flops(None, network, parameters(LEGACY), 0, 32) is None
    assert step_flops(None, network, parameters(LEGACY), 4, None) is None  # no sequence length
    assert step_flops(None, LegacyModel(2, None), parameters(LEGACY), 4, 32) is None


def moe_config() -> Any:
    """A real TransformerConfig of a tiny MoE model: 2 layers, 4 heads of 16, 4 experts, top-2."""
    from mindformers.parallel_core.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        seq_length=32,
        vocab_size=256,
        ffn_hidden_size=128,
        num_moe_experts=4,
        moe_router_topk=2,
        add_bias_linear=False,
    )


@pytest.mark.process  # imports MindFormers in this process (seconds; it logs under ./output)
def test_an_mcore_moe_model_counts_its_routed_experts_at_top_k_over_experts() -> None:
    mcore = McoreModel(moe_config(), None, None)
    shapes = {
        "embedding.word_embeddings.weight": (256, 64),
        "decoder.layers.0.self_attention.linear_qkv.weight": (192, 64),
        "decoder.layers.1.mlp.experts.weight1": (4, 64, 64),  # a token passes 2 of the 4
        "decoder.layers.1.mlp.shared_experts.linear_fc1.weight": (64, 64),  # every token passes it
    }
    # The config's seq_length (32) wins over the one given; width = 4 heads x 16 channels.
    flops = estimated_flops(mcore, None, parameters(shapes), 4, 4096)
    assert flops == 6 * 128 * (192 * 64 + 4 * 64 * 64 * 2 / 4 + 64 * 64 + 2 * 32 * 64)


@pytest.mark.process  # imports MindFormers in this process (seconds; it logs under ./output)
def test_an_mcore_model_takes_mindformers_formula() -> None:
    from mindformers.models.utils import convert_transformer_config_to_args_for_tflops, num_floating_point_operations

    config = moe_config()
    formula = num_floating_point_operations(convert_transformer_config_to_args_for_tflops(copy.copy(config)), 8)
    assert step_flops(McoreModel(config, None, None), None, [], 8, 32) == StepFlops(formula, MINDFORMERS_FORMULA)


ESTIMATE_BESIDE_FORMULA = (
    BUILD_MCORE_MODELS
    + """
import copy
from mindformers.models.utils import convert_transformer_config_to_args_for_tflops, num_floating_point_operations
from mindformers_tbplugin.framework.mcore import McoreModel
from mindformers_tbplugin.framework.model_flops import estimated_flops
found = {}
for name, net in (("qwen3", qwen3), ("deepseek_v3", deepseek)):
    config = net.get_gpt_transformer_config()
    formula = num_floating_point_operations(convert_transformer_config_to_args_for_tflops(copy.copy(config)), 4)
    mcore = McoreModel(config, net.get_gpt_model(), net)
    found[name] = (formula, estimated_flops(mcore, net, net.trainable_params(), 4, None))
print("FLOPS " + json.dumps(found))
"""
)


@pytest.mark.process
def test_the_estimate_beside_mindformers_formula_on_real_mcore_models(tmp_path: Path) -> None:
    found = printed_json(ESTIMATE_BESIDE_FORMULA, tmp_path, "FLOPS")
    formula, estimate = found["qwen3"]
    assert estimate == pytest.approx(formula, rel=0.02)  # a dense decoder: the same count, norms aside
    formula, estimate = found["deepseek_v3"]
    assert estimate == pytest.approx(formula, rel=0.35)  # MLA, MoE top-k, MTP: an estimate
    print(f"DeepSeek-V3 tiny: estimate / formula = {estimate / formula:.3f}")
