"""What a run is, written once at train begin: HParams, the resolved config as text, the model graph
and its parameter counts; and the HParams session status at the end.

The values are gathered on the training thread (they need the live config and cells); every
protobuf is built on the writer thread through :meth:`RunWriter.add_built`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hp

from mindformers_tbplugin.framework import running_config
from mindformers_tbplugin.tfevents import model_graph
from mindformers_tbplugin.pipeline.metrics import EVAL_LOSS, TRAIN_LOSS, static_learning_rate
from mindformers_tbplugin.framework.model_facts import ModelFacts
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.tfevents.writer import RunWriter

if TYPE_CHECKING:
    from mindformers_tbplugin.framework.trainers import TrainStart

CONFIG_TAG = "run/config"
PARAMETERS_TAG = "run/parameters"
HPARAM_METRICS = (TRAIN_LOSS, EVAL_LOSS)

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
    ("num_layers", ("model.model_config.num_layers", "model.num_hidden_layers")),
    ("num_heads", ("model.model_config.num_heads", "model.num_attention_heads")),
    ("vocab_size", ("model.model_config.vocab_size", "model.vocab_size")),
    ("compute_dtype", ("model.model_config.compute_dtype", "model.compute_dtype")),
    ("data_parallel", ("parallel_config.data_parallel", "parallelism.data_parallel_shard")),
    ("model_parallel", ("parallel_config.model_parallel", "parallelism.tensor_parallel")),
    ("pipeline_stage", ("parallel_config.pipeline_stage", "parallelism.pipeline_parallel")),
    ("micro_batch_num", ("parallel_config.micro_batch_num",)),
    ("use_parallel", ("use_parallel",)),
    ("seed", ("seed", "training.seed")),
)
_FROM_RUN = ("experiment", "batch_size", "global_batch_size", "parameters", "world_size")
HPARAM_NAMES = tuple(sorted([name for name, _ in _FROM_YAML] + list(_FROM_RUN)))
# Declared column types let the dashboard sort and filter; every other column is a number.
_STRING_HPARAMS = {"experiment", "lr_schedule", "optimizer", "model_type", "compute_dtype"}
_BOOL_HPARAMS = {"use_parallel"}


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
) -> dict[str, bool | int | float | str]:
    """The run's hyperparameters: from the YAML when MindFormers runs it, else what the callback
    parameters tell (plain MindSpore)."""
    values: dict[str, Any] = {"experiment": experiment, "world_size": topology.world_size}
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
    accumulation = values.get("gradient_accumulation_steps") or 1
    if config is not None and config.global_batch_size:
        values["global_batch_size"] = config.global_batch_size
    elif facts.samples_per_step:
        values["global_batch_size"] = int(facts.samples_per_step) * int(accumulation)
    typed = {name: _typed(name, value) for name, value in values.items()}
    return {name: value for name, value in typed.items() if value is not None}


def _typed(name: str, value: Any) -> bool | float | str | None:
    """``value`` as its column's declared type; None (left out) when it is not one."""
    kind = _hparam_type(name)
    if kind == api_pb2.DATA_TYPE_STRING:
        return str(value)
    if kind == api_pb2.DATA_TYPE_BOOL:
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


# -- protobufs (writer thread) --------------------------------------------------------------------
def _event(step: int, wall_time: float, summary: summary_pb2.Summary) -> event_pb2.Event:
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary)


def experiment_event(step: int, wall_time: float, start_time: float) -> event_pb2.Event:
    """The experiment definition: the HParams table's columns and metrics."""
    experiment = api_pb2.Experiment(
        hparam_infos=[api_pb2.HParamInfo(name=name, type=_hparam_type(name)) for name in HPARAM_NAMES],
        metric_infos=[hp.Metric(tag, display_name=tag).as_proto() for tag in HPARAM_METRICS],
        time_created_secs=start_time,
    )
    return _plugin_event(
        step, wall_time, metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)
    )


def _hparam_type(name: str) -> int:
    if name in _STRING_HPARAMS:
        return api_pb2.DATA_TYPE_STRING
    return api_pb2.DATA_TYPE_BOOL if name in _BOOL_HPARAMS else api_pb2.DATA_TYPE_FLOAT64


def _plugin_event(step: int, wall_time: float, tag: str, data: plugin_data_pb2.HParamsPluginData) -> event_pb2.Event:
    value = summary_pb2.Summary.Value(
        tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR
    )
    return _event(step, wall_time, summary_pb2.Summary(value=[value]))


def session_start_event(
    step: int, wall_time: float, values: dict[str, bool | int | float | str], start_time: float
) -> event_pb2.Event:
    """This run's session: its hyperparameter values (runs with equal values form one group)."""
    return _event(step, wall_time, hp.hparams_pb(values, start_time_secs=start_time))


def session_end_event(step: int, wall_time: float, succeeded: bool) -> event_pb2.Event:
    status = api_pb2.STATUS_SUCCESS if succeeded else api_pb2.STATUS_FAILURE
    end = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=wall_time)
    return _plugin_event(
        step, wall_time, metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)
    )


def graph_event(step: int, wall_time: float, cells: list[model_graph.CellInfo]) -> event_pb2.Event:
    return event_pb2.Event(wall_time=wall_time, step=step, graph_def=model_graph.graph_def(cells).SerializeToString())


# -- entry points for TensorBoardMonitor ----------------------------------------------------------
def write_run_start(writer: RunWriter, start: TrainStart, experiment: str, options: RunInfoOptions) -> None:
    """Queue what describes the run. Call on the writing rank, at train begin."""
    step = start.facts.initial_global_step
    cells = model_graph.describe_cells(model_graph.unwrap_model(start.network)) if start.network is not None else []
    if options.graph and cells:
        writer.add_built(step, lambda s, wall: graph_event(s, wall, cells))
        writer.add_text(step, PARAMETERS_TAG, model_graph.parameter_table(cells))
    if options.config and start.config is not None:
        writer.add_text(step, CONFIG_TAG, config_text(start.config.config))
    if options.hparams:
        facts = start.facts
        parameters = cells[0].total if cells else sum(int(p.size) for p in facts.trainable_params) or None
        values = hparam_values(start.config, facts, start.topology, experiment, parameters, start.epochs)
        wall_start = time.time()
        writer.add_built(step, lambda s, wall: experiment_event(s, wall, wall_start))
        writer.add_built(step, lambda s, wall: session_start_event(s, wall, values, wall_start))


def write_run_end(writer: RunWriter, step: int, succeeded: bool) -> None:
    """Close the HParams session with its status (TensorBoard shows it in the session table)."""
    writer.add_built(step, lambda s, wall: session_end_event(s, wall, succeeded))
