"""The model FLOPs of one training step: MindFormers' own formula for mcore models, a documented
estimate (:func:`~mindformers_tbplugin.pipeline.model_flops.estimate_flops_per_step`) for the others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mindformers_tbplugin.framework import mcore as mcore_models
from mindformers_tbplugin.framework.model_facts import find_attribute
from mindformers_tbplugin.pipeline.gradient_groups import layer_group
from mindformers_tbplugin.pipeline.model_flops import estimate_flops_per_step

MINDFORMERS_FORMULA = "MindFormers' num_floating_point_operations"
ESTIMATE = "estimate: 6 x tokens x (matrix parameters + layers x seq_length x attention width)"
# mcore's routed experts (``...mlp.experts.weight1``): a token passes top-k of them, so their matrices
# count top-k / experts (shared experts, ``...mlp.shared_experts...``, count in full).
ROUTED_EXPERT = ".experts."


@dataclass(frozen=True)
class StepFlops:
    flops: float  # forward + backward, the whole job's step
    source: str  # MINDFORMERS_FORMULA or ESTIMATE


def step_flops(
    mcore: mcore_models.McoreModel | None,
    network: Any,
    trainable_params: list[Any],
    global_batch_size: float | None,
    seq_length: int | None,
) -> StepFlops | None:
    """None when the batch or the model's shape is unknown."""
    if not global_batch_size:
        return None
    if mcore is not None:
        flops = mcore_models.flops_per_step(mcore, int(global_batch_size))
        if flops is not None:
            return StepFlops(flops, MINDFORMERS_FORMULA)
    flops = estimated_flops(mcore, network, trainable_params, global_batch_size, seq_length)
    return StepFlops(flops, ESTIMATE) if flops is not None else None


def estimated_flops(
    mcore: mcore_models.McoreModel | None,
    network: Any,
    trainable_params: list[Any],
    global_batch_size: float,
    seq_length: int | None,
) -> float | None:
    """The estimate, from an mcore model's config (MindFormers 1.7-1.8 have no formula) or a legacy
    model's cells."""
    routed_share = 1.0
    if mcore is not None:
        config = mcore.config
        layers = getattr(config, "num_layers", None)
        width = (getattr(config, "kv_channels", 0) or 0) * (getattr(config, "num_attention_heads", 0) or 0)
        seq_length = getattr(config, "seq_length", None) or seq_length
        experts = getattr(config, "num_moe_experts", None)
        if experts:
            routed_share = (getattr(config, "moe_router_topk", 1) or 1) / experts
    else:
        layers = find_attribute(network, "num_layers")
        width = find_attribute(network, "hidden_size")
    if not all(isinstance(value, int) and value > 0 for value in (layers, width, seq_length)):
        return None
    matrices = sum(
        int(p.size) * (routed_share if ROUTED_EXPERT in p.name else 1.0)
        for p in trainable_params
        if len(p.shape) >= 2 and layer_group(p.name) != "embedding"
    )
    return estimate_flops_per_step(matrices, layers, width, seq_length, global_batch_size)
