"""What describes a run, decided from MindFormers' config and the live model at train begin: HParams,
the resolved config as text, the model graph and its parameter counts. The values are gathered on
the training thread (they need the live config and cells); session/run_record.py writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from mindformers_tbplugin.framework import running_config
from mindformers_tbplugin.framework.model_facts import ModelFacts
from mindformers_tbplugin.pipeline.metrics import COMPARED, EVAL_LOSS, TRAIN_LOSS, static_learning_rate
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.tfevents.events import CellInfo, ParamInfo

if TYPE_CHECKING:
    from mindformers_tbplugin.framework.trainers import TrainStart

# With a baseline (TensorBoardMonitor's ``baseline``), the comparison's summary: the last running mean
# errors. Every run declares them (TensorBoard takes one run's declaration for all): blank without one.
HPARAM_METRICS = (TRAIN_LOSS, EVAL_LOSS, *(tag for tags in COMPARED.values() for tag in tags[3:]))
BASELINE_HPARAM = "baseline"  # the baseline's path, when a run has one


def _model_paths(*keys: str) -> tuple[str, ...]:
    """A model key where MindFormers 1.x (``model.model_config``) and 2.x (``model``) put it."""
    return tuple(f"model.model_config.{key}" for key in keys) + tuple(f"model.{key}" for key in keys)


# (hparam name, dotted YAML paths): the columns of TensorBoard's HParams table. Every run declares
# all of them, so whichever run's experiment TensorBoard picks, the columns are the same. The first
# path is the classic trainer's YAML, a second one MindFormers 2.x's PyNative trainer's.
_FROM_YAML = (
    ("learning_rate", ("lr_schedule.learning_rate", "lr_scheduler.learning_rate")),
    ("lr_schedule", ("lr_schedule.type", "lr_scheduler.type")),
    ("lr_end", ("lr_schedule.lr_end", "lr_scheduler.lr_end")),
    ("warmup_steps", ("lr_schedule.warmup_steps", "lr_scheduler.warmup_steps")),
    ("warmup_ratio", ("lr_schedule.warmup_ratio", "lr_scheduler.warmup_ratio")),
    ("optimizer", ("optimizer.type",)),
    ("weight_decay", ("optimizer.weight_decay",)),
    ("epochs", ("runner_config.epochs",)),
    ("gradient_accumulation_steps", ("runner_config.gradient_accumulation_steps",)),
    ("seq_length", ("model.model_config.seq_length", "model.seq_length")),
    ("model_type", ("model.arch.type", "model.architectures")),
    ("hidden_size", ("model.model_config.hidden_size", "model.hidden_size")),
    (
        "num_layers",
        ("model.model_config.num_layers", "model.model_config.num_hidden_layers", "model.num_hidden_layers"),
    ),
    (
        "num_heads",
        ("model.model_config.num_heads", "model.model_config.num_attention_heads", "model.num_attention_heads"),
    ),
    # Mixture of experts and multi-token prediction (mcore models; the live config, when there is one,
    # has them whatever the YAML spelling and wins over these).
    ("num_experts", _model_paths("n_routed_experts", "num_experts", "num_moe_experts")),
    ("moe_top_k", _model_paths("num_experts_per_tok", "moe_router_topk")),
    ("num_shared_experts", _model_paths("n_shared_experts", "shared_expert_num")),
    ("mtp_depth", _model_paths("num_nextn_predict_layers", "mtp_num_layers")),
    ("moe_aux_loss_coeff", _model_paths("moe_aux_loss_coeff", "router_aux_loss_coef")),
    ("vocab_size", ("model.model_config.vocab_size", "model.vocab_size")),
    ("compute_dtype", ("model.model_config.compute_dtype", "model.compute_dtype")),
    ("data_parallel", ("parallel_config.data_parallel", "parallelism.data_parallel_shard")),
    ("model_parallel", ("parallel_config.model_parallel", "parallelism.tensor_parallel")),
    ("pipeline_stage", ("parallel_config.pipeline_stage", "parallelism.pipeline_parallel")),
    ("expert_parallel", ("parallel_config.expert_parallel", "parallelism.expert_parallel")),
    ("context_parallel", ("parallel_config.context_parallel", "parallelism.context_parallel")),
    ("micro_batch_num", ("parallel_config.micro_batch_num",)),
    ("use_parallel", ("use_parallel",)),
    ("seed", ("seed", "training.seed")),
)
_FROM_RUN = (
    "experiment",
    "batch_size",
    "global_batch_size",
    "parameters",
    "world_size",
    "router",
    "data_parallel_replicas",
    "model_flops_per_step",
    BASELINE_HPARAM,
)
HPARAM_NAMES = tuple(sorted([name for name, _ in _FROM_YAML] + list(_FROM_RUN)))
# Declared column types let the dashboard sort and filter; every other column is a number.
_STRING_HPARAMS = {"experiment", "lr_schedule", "optimizer", "model_type", "compute_dtype", "router", BASELINE_HPARAM}
_BOOL_HPARAMS = {"use_parallel"}


def _column_type(name: str) -> type:
    return str if name in _STRING_HPARAMS else bool if name in _BOOL_HPARAMS else float


HPARAM_COLUMNS = {name: _column_type(name) for name in HPARAM_NAMES}


@dataclass(frozen=True)
class RunInfoOptions:
    hparams: bool = True
    config: bool = True
    graph: bool = True


def hparam_values(
    config: running_config.RunningConfig | None,
    facts: ModelFacts,
    topology: Topology,
    experiment: str,
    parameters: int | None,
    epochs: int | None,
    model_values: Mapping[str, Any] | None = None,
) -> dict[str, bool | int | float | str]:
    """The run's hyperparameters: from the YAML when MindFormers runs it, else what the callback
    parameters tell (plain MindSpore); ``model_values`` (what the live model says: layer and expert
    counts, model FLOPs) win over the YAML's."""
    values: dict[str, Any] = {
        "experiment": experiment,
        "world_size": topology.world_size,
        "data_parallel_replicas": topology.data_parallel,
    }
    if facts.samples_per_step:
        values["batch_size"] = int(facts.samples_per_step) // max(topology.data_parallel_factor, 1)
    if facts.tokens_per_sample:
        values["seq_length"] = facts.tokens_per_sample
    if parameters:
        values["parameters"] = parameters
    if epochs:
        values["epochs"] = epochs
    lr = static_learning_rate(facts.optimizer)
    if lr is not None:
        values["learning_rate"] = lr
    if config is not None:
        for name, paths in _FROM_YAML:
            found = (running_config.get_path(config.config, path) for path in paths)
            value = next((v for v in found if v is not None and not isinstance(v, (Mapping, list, tuple))), None)
            if value is not None:
                values[name] = value
        if running_config.get_path(config.config, "lr_schedule.learning_rate") is None:
            optimizer_lr = running_config.get_path(config.config, "optimizer.learning_rate")
            if optimizer_lr is not None and not isinstance(optimizer_lr, Mapping):
                values["learning_rate"] = optimizer_lr
    values.update(model_values or {})
    accumulation = values.get("gradient_accumulation_steps") or 1
    if config is not None and config.global_batch_size:
        values["global_batch_size"] = config.global_batch_size
    elif facts.samples_per_step:
        values["global_batch_size"] = int(facts.samples_per_step) * int(accumulation)
    typed = {name: _typed(name, value) for name, value in values.items()}
    return {name: value for name, value in typed.items() if value is not None}


def _typed(name: str, value: Any) -> bool | float | str | None:
    """``value`` as its column's declared type; None (left out) when it is not one."""
    kind = _column_type(name)
    if kind is str:
        return str(value)
    if kind is bool:
        return value if isinstance(value, bool) else None
    try:
        number = float(value)  # also "3e-4", which YAML 1.1 reads as a string
    except (TypeError, ValueError):
        return None
    return int(number) if isinstance(value, int) and not isinstance(value, bool) else number


def config_text(config: Mapping[str, Any]) -> str:
    """The resolved config as YAML inside a Markdown code block (secret-looking values masked)."""
    body = yaml.safe_dump(running_config.plain(config), sort_keys=False, allow_unicode=True, width=120)
    return f"```yaml\n{body}```"


# -- the model's cells ----------------------------------------------------------------------------
_WRAPPER_ATTRS = ("network", "_network", "_backbone")


def unwrap_model(network: Any) -> Any:
    """The model inside MindSpore/MindFormers train and loss wrappers (``network``, ``_backbone``)."""
    seen = set()
    while network is not None and id(network) not in seen:
        seen.add(id(network))
        inner = next((getattr(network, a) for a in _WRAPPER_ATTRS if _is_cell(getattr(network, a, None))), None)
        if inner is None:
            return network
        network = inner
    return network


def _is_cell(obj: Any) -> bool:
    return hasattr(obj, "cells_and_names") and hasattr(obj, "parameters_and_names")


def describe_cells(model: Any) -> list[CellInfo]:
    """Every cell of ``model`` with its own parameters; totals include the cells below (each
    parameter counted once, even when shared)."""
    cells: list[CellInfo] = []
    owner_of: dict[int, str] = {}
    for path, cell in model.cells_and_names():
        info = CellInfo(path=path, type=type(cell).__name__)
        for full_name, param in cell.parameters_and_names(expand=False):
            if id(param) in owner_of:
                continue
            owner_of[id(param)] = path
            info.params.append(
                ParamInfo(
                    name=full_name.rsplit(".", 1)[-1],
                    shape=tuple(int(d) for d in param.shape),
                    dtype=str(param.dtype),
                    trainable=bool(param.requires_grad),
                )
            )
        cells.append(info)
    by_path = {info.path: info for info in cells}
    for info in cells:
        own = sum(p.count for p in info.params)
        own_trainable = sum(p.count for p in info.params if p.trainable)
        for ancestor in _ancestors(info.path):
            if ancestor in by_path:
                by_path[ancestor].total += own
                by_path[ancestor].trainable += own_trainable
    return cells


def _ancestors(path: str) -> Iterable[str]:
    """``"a.b.c"`` -> ``"a.b.c", "a.b", "a", ""``."""
    parts = path.split(".") if path else []
    for end in range(len(parts), -1, -1):
        yield ".".join(parts[:end])


def parameter_table(cells: list[CellInfo], depth: int = 2) -> str:
    """Markdown: total and trainable parameters of the model and of its blocks down to ``depth``."""
    rows = ["| block | type | parameters | trainable |", "|---|---|---:|---:|"]
    for info in cells:
        level = len(info.path.split(".")) if info.path else 0
        if level <= depth and (info.total or not info.path):
            name = info.path or "(model)"
            rows.append(f"| `{name}` | {info.type} | {info.total:,} | {info.trainable:,} |")
    return "\n".join(rows)


# -- what describes a run ---------------------------------------------------------------------------
@dataclass
class RunDescription:
    """What a run records at train begin, read from the live model and config (session/ writes it)."""

    step: int
    cells: list[CellInfo]  # for the Graphs dashboard (empty: none)
    parameters: str | None  # the parameter-count table
    config: str | None  # the resolved YAML
    hparams: dict[str, bool | int | float | str] | None


def describe_run(
    start: TrainStart, experiment: str, options: RunInfoOptions, model_values: Mapping[str, Any] | None = None
) -> RunDescription:
    """What describes the run, as ``options`` ask. On the writing rank, at train begin."""
    cells = describe_cells(unwrap_model(start.network)) if start.network is not None else []
    hparams = None
    if options.hparams:
        facts = start.facts
        parameters = cells[0].total if cells else sum(int(p.size) for p in facts.trainable_params) or None
        hparams = hparam_values(start.config, facts, start.topology, experiment, parameters, start.epochs, model_values)
    return RunDescription(
        step=start.facts.initial_global_step,
        cells=cells if options.graph else [],
        parameters=parameter_table(cells) if options.graph and cells else None,
        config=config_text(start.config.config) if options.config and start.config is not None else None,
        hparams=hparams,
    )
