"""MindFormers' Megatron-style "mcore" models (``use_legacy: False``: Qwen3, Qwen3-MoE, DeepSeek-V3):
what a monitor reads from them, found once at train begin, without changing what training computes.

* The model's ``TransformerConfig`` (every YAML spelling already resolved by MindFormers): layer,
  head, expert and multi-token-prediction counts for the HParams, and MindFormers' own FLOPs formula
  (``num_floating_point_operations``, the one MFLossMonitor uses for ``model-flops-throughput-per-npu``).
* The loss parts the train wrapper accumulates in MindFormers' ``parameter_register`` (only with the
  top-level ``print_separate_loss``, and only for MoE or MTP models, as MindFormers itself reads them),
  with the factors that turn each accumulated value into its contribution to the total loss.
* Every MoE router (MTP layers included) with its per-expert load accumulator: ``expert_load`` for
  expert-bias routers (DeepSeek), ``fi_accu`` for ``gbs_aux_loss`` routers (Qwen3-MoE).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from mindformers_tbplugin.framework.model_facts import find_attribute
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.expert_load import AUX_LOSS, EXPERT_BIAS, RouterSet
from mindformers_tbplugin.pipeline.gradient_groups import layer_group

# parameter_register key -> (our tag, the wrapper attribute that scales its accumulated value back to
# its contribution to the loss; None: accumulated as it is added). MindFormers' wrapper adds
# ``aux_loss / aux_loss_scale`` (aux_loss_scale = MoE layers x moe_aux_loss_coeff) and
# ``indexer_loss / total_num_layers``; the MTP loss comes already multiplied by mtp_loss_factor.
LOSS_PARTS = {
    "lm_loss": (metrics.TRAIN_LOSS_LM, None),
    "mtp_loss": (metrics.TRAIN_LOSS_MTP, None),
    "aux_loss": (metrics.TRAIN_LOSS_AUX, "aux_loss_scale"),
    "indexer_loss": (metrics.TRAIN_LOSS_INDEXER, "total_num_layers"),
}


@dataclass(frozen=True)
class Router:
    group: str  # the layer, named as the gradient groups are: "layers.3", "mtp.layers.0"
    load: Any  # the Parameter accumulating each expert's share of the routed slots
    bias: Any  # the expert bias Parameter, or None


@dataclass(frozen=True)
class LossPart:
    tag: str  # train/loss_lm, ...
    parameter: Any
    factor: float  # accumulated value x factor = contribution to the total loss


@dataclass
class McoreModel:
    config: Any  # TransformerConfig
    model: Any  # GPTModel
    train_network: Any

    @property
    def is_moe(self) -> bool:
        return bool(getattr(self.config, "num_moe_experts", None))

    @property
    def mtp_depth(self) -> int:
        return int(getattr(self.config, "mtp_num_layers", 0) or 0)


def find_mcore_model(train_network: Any) -> McoreModel | None:
    """The mcore model inside the training cell, or None (a legacy model, a plain MindSpore network)."""
    if train_network is None:
        return None
    from mindformers_tbplugin.framework.mindformers_api import resolve

    try:
        real = resolve("get_real_models")(train_network)
        get_config, get_model = real.get_gpt_transformer_config, real.get_gpt_model
    except (ImportError, AttributeError):
        return None
    if _legacy(real, get_config):
        return None
    try:
        return McoreModel(get_config(), get_model(), train_network)
    except Exception as exc:  # a layout we do not know: say which, once, and monitor the rest
        logger.warning(
            "TensorBoardMonitor: %s looks like an mcore model but %r; no loss parts, expert load or model FLOPs for it",
            type(real).__name__,
            exc,
        )
        return None


def _legacy(real: Any, get_config: Any) -> bool:
    """A legacy model: MindFormers' ``ModelMixin`` accessor on a model that never built a transformer
    config (its ``convert_to_transformer_config`` is what mcore models call)."""
    inherited = getattr(get_config, "__qualname__", "") == "ModelMixin.get_gpt_transformer_config"
    return inherited and getattr(real, "transformer_config", None) is None


def model_hparams(mcore: McoreModel) -> dict[str, Any]:
    """HParams the live config knows whatever the YAML spelling (num_hidden_layers, n_routed_experts, ...)."""
    config = mcore.config
    values: dict[str, Any] = {
        "num_layers": getattr(config, "num_layers", None),
        "num_heads": getattr(config, "num_attention_heads", None),
    }
    if mcore.is_moe:
        bias = bool(getattr(config, "moe_router_enable_expert_bias", False))
        values.update(
            num_experts=config.num_moe_experts,
            moe_top_k=getattr(config, "moe_router_topk", None),
            num_shared_experts=_shared_experts(config),
            router=f"{getattr(config, 'moe_router_score_function', 'softmax')}"
            f"{' + expert bias' if bias else ''}, {getattr(config, 'moe_router_load_balancing_type', 'aux_loss')}",
            moe_aux_loss_coeff=getattr(config, "moe_aux_loss_coeff", None),
        )
    if mcore.mtp_depth:
        values["mtp_depth"] = mcore.mtp_depth
    return {name: value for name, value in values.items() if value is not None}


def _shared_experts(config: Any) -> int:
    count = getattr(config, "shared_expert_num", None)
    if isinstance(count, int):
        return count
    return 1 if getattr(config, "moe_shared_expert_intermediate_size", None) else 0


def loss_parts(mcore: McoreModel) -> list[LossPart]:
    """The loss parts the wrapper accumulates, for MoE or MTP models (a dense model's ``lm_loss`` is
    never reset by MindFormers: a running sum, not a loss)."""
    if not (mcore.is_moe or mcore.mtp_depth) or not find_attribute(mcore.train_network, "print_separate_loss"):
        return []
    from mindformers_tbplugin.framework.mindformers_api import resolve

    try:
        register = resolve("parameter_register")
        registered = set(register.keys())
    except (ImportError, AttributeError):
        return []
    present = {
        "lm_loss": True,
        "mtp_loss": bool(mcore.mtp_depth),
        "aux_loss": mcore.is_moe,
        "indexer_loss": _has_indexer_loss(mcore.config),
    }
    parts = []
    for name, (tag, factor_attribute) in LOSS_PARTS.items():
        if name not in registered or not present[name]:  # MindFormers registers every key for every model
            continue
        factor = 1.0
        if factor_attribute is not None:
            found = find_attribute(mcore.train_network, factor_attribute)
            if not isinstance(found, (int, float)) or found <= 0:
                continue  # no such part in this model (e.g. no aux loss coefficient)
            factor = float(found)
        parts.append(LossPart(tag, register.get(name), factor))
    return parts


def _has_indexer_loss(config: Any) -> bool:
    """DeepSeek sparse attention's indexer (MindFormers registers the key for every model)."""
    attention = getattr(config, "experimental_attention_variant", None)
    return attention == "dsa" and (getattr(config, "dsa_indexer_loss_coeff", 0) or 0) > 0


def routers(mcore: McoreModel) -> tuple[list[Router], RouterSet | None]:
    """Every MoE router whose load the model accumulates, in layer order (decoder, then MTP)."""
    if not mcore.is_moe:
        return [], None
    config = mcore.config
    found = []
    for path, cell in mcore.model.cells_and_names():
        weight = getattr(cell, "weight", None)
        if not hasattr(cell, "fi_accu") or weight is None:
            continue
        bias = getattr(cell, "expert_bias", None) if getattr(cell, "moe_router_enable_expert_bias", False) else None
        if bias is not None:
            load = getattr(cell, "expert_load", None)
        elif getattr(config, "moe_router_load_balancing_type", None) == "gbs_aux_loss":
            load = cell.fi_accu
        else:
            load = None
        if load is None:
            logger.warning(
                "TensorBoardMonitor: the MoE router %s accumulates no per-expert load (load balancing type %r, no "
                "expert bias): no moe/ tags for it",
                path,
                getattr(config, "moe_router_load_balancing_type", None),
            )
            continue
        found.append(Router(layer_group(weight.name), load, bias))
    if not found:
        return [], None
    experts = int(found[0].load.shape[0])
    kinds = tuple(EXPERT_BIAS if router.bias is not None else AUX_LOSS for router in found)
    top_k = int(getattr(config, "moe_router_topk", 1) or 1)
    return found, RouterSet(tuple(router.group for router in found), experts, top_k, kinds)


def flops_per_step(mcore: McoreModel, global_batch_size: int) -> float | None:
    """MindFormers' model FLOPs of one training step (forward and backward) of ``global_batch_size``
    samples: ``num_floating_point_operations`` on the model's TransformerConfig, as MFLossMonitor
    computes it (on a copy: MindFormers' converter sets attributes on the config it is given)."""
    from mindformers_tbplugin.framework.mindformers_api import resolve

    try:
        convert = resolve("convert_transformer_config_to_args_for_tflops")
        count = resolve("num_floating_point_operations")
    except ImportError:
        return None  # MindFormers 1.7-1.8: the caller estimates
    try:
        return float(count(convert(copy.copy(mcore.config)), global_batch_size))
    except Exception as exc:  # a config the formula does not cover
        logger.warning("TensorBoardMonitor: MindFormers' FLOPs formula failed on this model (%r); estimating", exc)
        return None
