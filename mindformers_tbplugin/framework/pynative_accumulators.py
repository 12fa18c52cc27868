"""What MindFormers 2.x's PyNative mcore models (Qwen3-MoE, DeepSeek-V3, ...) accumulate over a step's
micro-batches, found once at train begin, without changing what training computes.

* Loss parts: module-level trackers that the step's forwards add to, one slot per layer
  (``_MOE_LAYER_WISE_LOGGING_TRACKER``: each MoE layer's load-balancing loss over
  ``moe_aux_loss_coeff``; ``_MTP_LAYER_WISE_LOGGING_TRACKER``: each multi-token-prediction depth's
  loss, already times ``mtp_loss_scaling_factor / depths``; the sparse-attention indexer's). The
  trainer's LossCallback reads and clears them at every step end, then prints their mean over the
  micro-batches. Their contributions to the step's objective (whose main part, the language-model loss,
  is the loss the trainer hands callbacks): ``moe_aux_loss_coeff x`` the sum over MoE layers of the
  tracker over the micro-batches (per layer too: ``loss_aux/<group>``), the MTP tracker's sum over
  depths over the micro-batches, and the sparse-attention indexer tracker's sum over the micro-batches
  (its loss coefficient is applied inside the indexer loss). With tensor or context parallelism the
  router also scales its aux loss by that group's size for the gradient; that factor is not applied here.
* Expert load: every MoE layer's ``tokens_per_expert`` (MTP layers included), the tokens each expert
  got, summed over the micro-batches (a recomputed forward does not add again). With an expert bias,
  the LossCallback's bias update zeroes them at every step end; without one they only grow, and the
  step's load is the growth (framework/accumulators.py learns which).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.accumulators import LossParts
from mindformers_tbplugin.framework.host_values import host_reader
from mindformers_tbplugin.framework.mcore import McoreModel, Router
from mindformers_tbplugin.framework.mindformers_api import resolve
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.expert_load import AUX_LOSS, EXPERT_BIAS, RouterSet
from mindformers_tbplugin.pipeline.gradient_groups import layer_group

LOAD = "tokens_per_expert"  # the MoE layer's per-expert token counts


def moe_layers(mcore: McoreModel) -> list[tuple[str, Any]]:
    """``(group, MoE layer cell)`` in model order (decoder, then MTP layers)."""
    found = []
    for path, cell in mcore.model.cells_and_names():
        if getattr(cell, LOAD, None) is not None and getattr(cell, "router", None) is not None:
            found.append((layer_group(f"{path}."), cell))
    return found


def routers(mcore: McoreModel) -> tuple[list[Router], RouterSet | None]:
    """Every MoE layer's per-expert token counts and expert bias; a warning when the model is a
    mixture of experts but no layer holds what this release's MoE layers hold."""
    if not mcore.is_moe:
        return [], None
    layers = moe_layers(mcore)
    if not layers:
        logger.warning(
            "TensorBoardMonitor: %s is a mixture-of-experts model, but none of its layers holds per-expert token "
            "counts (%s) as MindFormers 2.x's PyNative MoE layers do: no moe/ tags",
            type(mcore.train_network).__name__,
            LOAD,
        )
        return [], None
    found = [Router(group, getattr(cell, LOAD), getattr(cell, "expert_bias", None)) for group, cell in layers]
    experts = int(found[0].load.shape[0])
    kinds = tuple(EXPERT_BIAS if router.bias is not None else AUX_LOSS for router in found)
    top_k = int(getattr(mcore.config, "moe_router_topk", 1) or 1)
    return found, RouterSet(tuple(router.group for router in found), experts, top_k, kinds)


def loss_parts(mcore: McoreModel, accumulation_steps: Callable[[], int]) -> LossParts | None:
    """The trackers' loss parts of an MoE or MTP model, or None (a dense model has none; a release whose
    trackers are elsewhere gets one warning). ``accumulation_steps()``: the step's micro-batches."""
    config = mcore.config
    aux_coefficient = float(getattr(config, "moe_aux_loss_coeff", 0) or 0)
    slots = int(getattr(config, "num_layers", 0) or 0) + mcore.mtp_depth
    sources: list[tuple[str, int]] = []  # (tracker, slots)
    if mcore.is_moe and aux_coefficient > 0:
        sources.append(("get_moe_layer_wise_logging_tracker", slots))
    if mcore.mtp_depth and getattr(config, "mtp_loss_scaling_factor", None):
        sources.append(("get_mtp_layer_wise_logging_tracker", mcore.mtp_depth))
    if _has_indexer(config):
        sources.append(("get_indexer_loss_tracker", slots))
    if not sources:
        return None
    try:
        trackers = [(resolve(name), size) for name, size in sources]
    except ImportError as exc:
        logger.warning("TensorBoardMonitor: %s; no train/loss_* parts for this model", exc)
        return None
    aux_layers = [(layer_group(f"{path}."), int(cell.layer_number)) for path, cell in _aux_routers(mcore)]
    tags = [metrics.TRAIN_LOSS_AUX] if mcore.is_moe and aux_coefficient > 0 else []
    tags += [metrics.LOSS_AUX_PREFIX + group for group, _ in aux_layers] if tags else []
    names = [name for name, _ in sources]
    has_mtp = "get_mtp_layer_wise_logging_tracker" in names
    has_indexer = "get_indexer_loss_tracker" in names
    tags += [metrics.TRAIN_LOSS_MTP] if has_mtp else []
    tags += [metrics.TRAIN_LOSS_INDEXER] if has_indexer else []
    aux_slots = [slot for _, slot in aux_layers]

    def read() -> np.ndarray:
        return np.concatenate([_tracker_values(get_tracker, size) for get_tracker, size in trackers])

    def contributions(values: Any) -> dict[str, float]:
        values = np.asarray(values, dtype=np.float64)
        per_step = 1.0 / max(accumulation_steps(), 1)
        found: dict[str, float] = {}
        offset = 0
        if tags and tags[0] == metrics.TRAIN_LOSS_AUX:
            aux = values[:slots] * (aux_coefficient * per_step)
            found[metrics.TRAIN_LOSS_AUX] = float(aux.sum())
            for (group, _), slot in zip(aux_layers, aux_slots, strict=True):
                found[metrics.LOSS_AUX_PREFIX + group] = float(aux[slot])
            offset = slots
        if has_mtp:
            found[metrics.TRAIN_LOSS_MTP] = float(values[offset : offset + mcore.mtp_depth].sum() * per_step)
            offset += mcore.mtp_depth
        if has_indexer:
            found[metrics.TRAIN_LOSS_INDEXER] = float(values[offset:].sum() * per_step)
        return found

    return LossParts(len(tags), read, contributions)


def _aux_routers(mcore: McoreModel) -> list[tuple[str, Any]]:
    """The MoE layers that add to the load-balancing tracker (hash layers do not), with their slot."""
    return [
        (path, cell)
        for path, cell in mcore.model.cells_and_names()
        if getattr(cell, LOAD, None) is not None
        and getattr(cell, "router", None) is not None
        and not getattr(cell.router, "is_hash_layer", False)
        and isinstance(getattr(cell, "layer_number", None), int)
    ]


def _has_indexer(config: Any) -> bool:
    """A sparse-attention indexer with a loss (its layers add to the indexer tracker)."""
    coefficient = getattr(config, "dsa_indexer_loss_coeff", 0) or 0
    return bool(getattr(config, "experimental_attention_variant", None)) and coefficient > 0


def _tracker_values(get_tracker: Callable[[], dict], size: int) -> np.ndarray:
    """A tracker's slots now (zeros before the first forward creates them)."""
    values = get_tracker().get("values")
    if values is None:
        return np.zeros(size, dtype=np.float32)
    read = host_reader(values)()
    return read[:size] if read.size >= size else np.pad(read, (0, size - read.size))
