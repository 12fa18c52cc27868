"""Every ``Event`` this package writes, built from plain values (on the writer thread).

Scalars, the one record written every step, and the plugins' tensor records (see
:func:`tensor_event`) are encoded straight into protobuf's wire format:
inside a training process MindSpore forces protobuf's pure-Python implementation, where building
and serialising one ``Event`` per step costs tens of microseconds of GIL time that the training
thread waits for. The layout is fixed and tiny:

    Event   {wall_time = 1 (double), step = 2 (int64), summary = 5 (Summary)}
    Summary {value = 1 (repeated Value)}
    Value   {tag = 1 (string), simple_value = 2 (float)}

The bytes are identical to ``scalars_event(...).SerializeToString()`` (tests compare them): fields
in number order, proto3 defaults (wall_time +0.0, step 0, empty tag) omitted, ``simple_value`` always
written (it is a oneof member), floats narrowed to float32 the way protobuf narrows them. The rare
other records (text, histograms, HParams, the model graph) are protobuf objects.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from tensorboard.compat.proto import (
    attr_value_pb2,
    event_pb2,
    graph_pb2,
    node_def_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hp

from mindformers_tbplugin.tfevents.wire import encode_varint, float32_bytes

FILE_VERSION = "brain.Event:2"

# -- scalars, encoded directly ----------------------------------------------------------------------
_pack_double = struct.Struct("<d").pack
_ZERO_DOUBLE = bytes(8)

# Field keys: (field number << 3) | wire type (1 = fixed64, 0 = varint, 2 = length-delimited, 5 = fixed32).
_WALL_TIME = b"\x09"
_STEP = b"\x10"
_SUMMARY = b"\x2a"
_VALUE = b"\x0a"
_TAG = b"\x0a"
_SIMPLE_VALUE = b"\x15"

# Per tag, everything of its Summary.Value entry but the four value bytes (tags repeat every step).
_value_heads: dict[str, bytes] = {}
_MAX_CACHED_TAGS = 4096


def _value_head(tag: str) -> bytes:
    head = _value_heads.get(tag)
    if head is None:
        encoded = tag.encode("utf-8")
        tag_field = _TAG + encode_varint(len(encoded)) + encoded if encoded else b""
        head = _VALUE + encode_varint(len(tag_field) + 5) + tag_field + _SIMPLE_VALUE
        if len(_value_heads) < _MAX_CACHED_TAGS:  # bounded: a run that invents tags must not grow memory
            _value_heads[tag] = head
    return head


def encode_scalars_event(step: int, wall_time: float, values: Mapping[str, float]) -> bytes:
    """The serialised ``Event`` holding one ``Summary`` with a ``simple_value`` per tag."""
    summary = b"".join([_value_head(tag) + float32_bytes(value) for tag, value in values.items()])
    return _event_bytes(step, wall_time, summary)


def _event_bytes(step: int, wall_time: float, summary: bytes) -> bytes:
    """An ``Event`` around the serialised ``Summary`` (its values)."""
    wall = _pack_double(wall_time)
    parts = [_WALL_TIME + wall] if wall != _ZERO_DOUBLE else []  # -0.0 is not the default: written
    if step:
        parts.append(_STEP + encode_varint(step))
    parts.append(_SUMMARY + encode_varint(len(summary)) + summary)
    return b"".join(parts)


# -- protobuf records ---------------------------------------------------------------------------------
def _summary_event(step: int, wall_time: float, *values: summary_pb2.Summary.Value) -> event_pb2.Event:
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=values))


def file_version_event(wall_time: float) -> event_pb2.Event:
    """The first record of every file: TensorBoard checks it to know the format."""
    return event_pb2.Event(wall_time=wall_time, file_version=FILE_VERSION)


def scalars_event(step: int, wall_time: float, values: dict[str, float]) -> event_pb2.Event:
    """The protobuf twin of :func:`encode_scalars_event` (the reference its bytes are tested against)."""
    scalars = (summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items())
    return _summary_event(step, wall_time, *scalars)


def text_event(step: int, wall_time: float, tag: str, text: str) -> event_pb2.Event:
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        string_val=[text.encode("utf-8")],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]),
    )
    plugin = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    return _summary_event(step, wall_time, summary_pb2.Summary.Value(tag=tag, metadata=plugin, tensor=tensor))


def session_start_event(step: int, wall_time: float) -> event_pb2.Event:
    """``SessionLog.START``: TensorBoard drops points at or after ``step`` written before it."""
    return event_pb2.Event(
        wall_time=wall_time, step=step, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)
    )


def histogram_event(
    step: int, wall_time: float, tag: str, stats: Mapping[str, float], limits: Sequence[float], counts: Sequence[float]
) -> event_pb2.Event:
    """A ``HistogramProto`` value: TensorBoard's histograms and distributions dashboards read it."""
    histo = summary_pb2.HistogramProto(
        min=stats["min"],
        max=stats["max"],
        num=stats["num"],
        sum=stats["sum"],
        sum_squares=stats["sum_squares"],
        bucket_limit=limits,
        bucket=counts,
    )
    return _summary_event(step, wall_time, summary_pb2.Summary.Value(tag=tag, histo=histo))


# -- HParams ------------------------------------------------------------------------------------------
_HPARAM_TYPES = {str: api_pb2.DATA_TYPE_STRING, bool: api_pb2.DATA_TYPE_BOOL, float: api_pb2.DATA_TYPE_FLOAT64}


def tensor_event(step: int, wall_time: float, tag: str, array: np.ndarray, plugin_name: str, content: bytes) -> bytes:
    """A tensor summary owned by a plugin, serialised: ``array`` (float16 or float32) as raw
    little-endian bytes, the plugin's ``content`` in the summary metadata (TensorBoard's loaders keep
    both). Encoded straight into the wire format like the scalars (protobuf's pure-Python
    implementation takes about 200 µs per record, whatever its size), bytes identical to protobuf's:

        Value          {tag = 1, tensor = 8 (TensorProto), metadata = 9 (SummaryMetadata)}
        TensorProto    {dtype = 1, tensor_shape = 2 {dim = 2 {size = 1}}, tensor_content = 4}
        SummaryMetadata {plugin_data = 1 {plugin_name = 1, content = 2}, data_class = 4}
    """
    dtype = _TENSOR_TYPES[array.dtype.name]
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    dims = b"".join(_message(_DIM, _varint_field(_DIM_SIZE, size)) for size in array.shape)
    tensor = _varint_field(_DTYPE, dtype) + _message(_TENSOR_SHAPE, dims) + _bytes_field(_TENSOR_CONTENT, data)
    plugin = _bytes_field(_PLUGIN_NAME, plugin_name.encode("utf-8")) + _bytes_field(_PLUGIN_CONTENT, content)
    metadata = _message(_PLUGIN_DATA, plugin) + _varint_field(_DATA_CLASS, summary_pb2.DATA_CLASS_TENSOR)
    value = _bytes_field(_TAG, tag.encode("utf-8")) + _message(_TENSOR, tensor) + _message(_METADATA, metadata)
    return _event_bytes(step, wall_time, _message(_VALUE, value))


# Field keys of the tensor records (see tensor_event).
_TENSOR_TYPES = {"float16": types_pb2.DT_HALF, "float32": types_pb2.DT_FLOAT}
_TENSOR, _METADATA = b"\x42", b"\x4a"
_DTYPE, _TENSOR_SHAPE, _TENSOR_CONTENT, _DIM, _DIM_SIZE = b"\x08", b"\x12", b"\x22", b"\x12", b"\x08"
_PLUGIN_DATA, _PLUGIN_NAME, _PLUGIN_CONTENT, _DATA_CLASS = b"\x0a", b"\x0a", b"\x12", b"\x20"


def _message(key: bytes, payload: bytes) -> bytes:
    """A message field (written when set, even empty)."""
    return key + encode_varint(len(payload)) + payload


def _bytes_field(key: bytes, payload: bytes) -> bytes:
    """A string or bytes field: proto3 omits an empty one."""
    return _message(key, payload) if payload else b""


def _varint_field(key: bytes, value: int) -> bytes:
    return key + encode_varint(value) if value else b""


def _hparams_event(step: int, wall_time: float, tag: str, data: plugin_data_pb2.HParamsPluginData) -> event_pb2.Event:
    value = summary_pb2.Summary.Value(
        tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR
    )
    return _summary_event(step, wall_time, value)


def hparams_experiment_event(
    step: int, wall_time: float, columns: Mapping[str, type], metrics: Sequence[str], start_time: float
) -> event_pb2.Event:
    """The experiment definition: the HParams table's columns (name -> str, bool or float) and metrics."""
    experiment = api_pb2.Experiment(
        hparam_infos=[api_pb2.HParamInfo(name=name, type=_HPARAM_TYPES[kind]) for name, kind in columns.items()],
        metric_infos=[hp.Metric(tag, display_name=tag).as_proto() for tag in metrics],
        time_created_secs=start_time,
    )
    return _hparams_event(
        step, wall_time, metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)
    )


def hparams_session_start_event(
    step: int, wall_time: float, values: dict[str, bool | int | float | str], start_time: float
) -> event_pb2.Event:
    """This run's session: its hyperparameter values (runs with equal values form one group)."""
    return event_pb2.Event(wall_time=wall_time, step=step, summary=hp.hparams_pb(values, start_time_secs=start_time))


def hparams_session_end_event(step: int, wall_time: float, succeeded: bool) -> event_pb2.Event:
    status = api_pb2.STATUS_SUCCESS if succeeded else api_pb2.STATUS_FAILURE
    end = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=wall_time)
    return _hparams_event(
        step, wall_time, metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)
    )


# -- the model graph ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParamInfo:
    name: str  # short name inside its cell, e.g. "weight"
    shape: tuple[int, ...]
    dtype: str
    trainable: bool

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclass
class CellInfo:
    """One cell of the model as plain data, so the graph is built without touching MindSpore."""

    path: str  # dotted path from the model, "" for the model itself
    type: str
    params: list[ParamInfo] = field(default_factory=list)
    total: int = 0  # parameters of this cell and all cells below it
    trainable: int = 0


def _scope(root: str, path: str) -> str:
    return "/".join([root, *path.split(".")]) if path else root


def _attr_s(text: str) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(s=text.encode("utf-8"))


def graph_def(cells: list[CellInfo]) -> graph_pb2.GraphDef:
    """A GraphDef whose name scopes mirror the cell hierarchy (the Graphs dashboard expands them).

    Each cell becomes a name scope holding one op node (op = the cell's class, attributes: own and
    total parameter counts) and one ``Parameter`` node per parameter it owns (shape, dtype, count,
    trainable), wired into the cell's node.
    """
    root = cells[0].type if cells else "model"
    nodes = []
    for info in cells:
        scope = _scope(root, info.path)
        cell_node = f"{scope}/{info.type}"
        inputs = []
        for param in info.params:
            param_node = f"{scope}/{param.name}"
            shape = tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in param.shape]
            )
            nodes.append(
                node_def_pb2.NodeDef(
                    name=param_node,
                    op="Parameter",
                    attr={
                        "shape": attr_value_pb2.AttrValue(shape=shape),
                        "dtype": _attr_s(param.dtype),
                        "count": attr_value_pb2.AttrValue(i=param.count),
                        "trainable": attr_value_pb2.AttrValue(b=param.trainable),
                    },
                )
            )
            inputs.append(param_node)
        nodes.append(
            node_def_pb2.NodeDef(
                name=cell_node,
                op=info.type,
                input=inputs,
                attr={
                    "own_parameters": attr_value_pb2.AttrValue(i=sum(p.count for p in info.params)),
                    "total_parameters": attr_value_pb2.AttrValue(i=info.total),
                    "trainable_parameters": attr_value_pb2.AttrValue(i=info.trainable),
                },
            )
        )
    return graph_pb2.GraphDef(node=nodes)


def graph_event(step: int, wall_time: float, cells: list[CellInfo]) -> event_pb2.Event:
    return event_pb2.Event(wall_time=wall_time, step=step, graph_def=graph_def(cells).SerializeToString())
