"""Facts about the model and data a third-party callback must find by itself.

MindFormers gives its own monitors the global batch size, initial step etc. as injected arguments,
but not a plugin's callback; this module reads them from what every callback can see (the callback
parameters at train begin: networks, optimizer, dataset).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from mindformers_tbplugin.pipeline.topology import Topology


@dataclass
class ModelFacts:
    optimizer: Any = None
    trainable_params: list[Any] = field(default_factory=list)
    initial_global_step: int = 0  # optimizer steps already done (non-zero when resuming)
    samples_per_step: float | None = None  # across all data-parallel ranks
    tokens_per_sample: int | None = None


def _find(root: Any, predicate: Any, max_nodes: int = 200) -> Any | None:
    """Breadth-first search through wrapper cells (``network``, ``_backbone``, child cells)."""
    queue, seen = deque([root]), set()
    while queue and len(seen) < max_nodes:
        node = queue.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if predicate(node):
            return node
        for name in ("network", "_network", "_backbone", "backbone", "model"):
            queue.append(getattr(node, name, None))
        cells = getattr(node, "name_cells", None)
        if callable(cells):
            queue.extend(cells().values())
    return None


def find_attribute(root: Any, name: str) -> Any:
    """The first ``name`` attribute found on ``root`` or the cells it wraps, else None."""
    holder = _find(root, lambda cell: getattr(cell, name, None) is not None)
    return getattr(holder, name) if holder is not None else None


def trainable_params_of(network: Any) -> list[Any]:
    return list(network.trainable_params())


def _seq_length(network: Any) -> int | None:
    holder = _find(network, lambda cell: isinstance(getattr(getattr(cell, "config", None), "seq_length", None), int))
    return holder.config.seq_length if holder is not None else None


def _global_step(optimizer: Any) -> int:
    step = getattr(optimizer, "global_step", None)
    if step is None:
        return 0
    try:
        value = step.asnumpy() if hasattr(step, "asnumpy") else step
        return int(value.reshape(-1)[0]) if hasattr(value, "reshape") else int(value)
    except (TypeError, ValueError, IndexError):
        return 0


def read_model_facts(cb_params: Any, topology: Topology) -> ModelFacts:
    train_network = cb_params.get("train_network")
    optimizer = cb_params.get("optimizer") or getattr(train_network, "optimizer", None)
    network = cb_params.get("network") or train_network
    facts = ModelFacts(optimizer=optimizer)
    if optimizer is not None:
        facts.trainable_params = list(getattr(optimizer, "parameters", []) or [])
        facts.initial_global_step = max(_global_step(optimizer), int(cb_params.get("initial_step") or 0))
    elif network is not None:
        facts.trainable_params = trainable_params_of(network)
    dataset = cb_params.get("train_dataset")
    batch = dataset.get_batch_size() if dataset is not None else None
    if batch:
        facts.samples_per_step = float(batch * topology.data_parallel_factor)
    facts.tokens_per_sample = _seq_length(network)
    return facts


def loss_scale_for_pipeline(topology: Topology, network: Any) -> float:
    """MFLossMonitor divides the loss by the number of micro-batches under pipeline parallelism
    (the pipeline cell sums them); return that divisor so our loss equals the printed one."""
    if topology.pipeline_stages <= 1:
        return 1.0
    micro = find_attribute(network, "micro_size")
    return float(micro) if isinstance(micro, int) and micro > 1 else 1.0
