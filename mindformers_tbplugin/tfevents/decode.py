"""The one event decoder: the protobuf fields of an ``Event`` that ``mftb watch``, ``mftb doctor`` and
the dashboards' record stores read, straight from a record's bytes, without protobuf objects.

Fields kept: ``wall_time``, ``step``, a ``SessionLog.START``, and per ``Summary.Value`` its tag, a
``simple_value``, the plugin name and content and data class of its metadata, and its ``TensorProto``
(raw; :func:`tensor_array` reads dtype, shape and content). Everything else is skipped by its wire
type. Against ``Event.FromString`` see BENCHMARKS.md ("Decoding events"); ``mftb watch`` adds a faster
path for the layout writers repeat every step (tfevents/reader.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from mindformers_tbplugin.tfevents.wire import read_key, read_varint, skip_field

_unpack_f32 = struct.Struct("<f").unpack_from
_unpack_f64 = struct.Struct("<d").unpack_from
_SESSION_START = 1  # SessionLog.status START
SCALARS_PLUGIN = "scalars"
DATA_CLASS_SCALAR = 1  # SummaryMetadata.data_class


@dataclass
class Value:
    tag: str
    simple_value: float | None = None
    plugin_name: str = ""
    plugin_content: bytes = b""
    data_class: int = 0
    tensor: bytes | None = None  # the raw TensorProto
    has_metadata: bool = False

    @property
    def is_scalar(self) -> bool:
        """The metadata says scalar: plugin ``scalars`` or data class SCALAR."""
        return self.plugin_name == SCALARS_PLUGIN or self.data_class == DATA_CLASS_SCALAR


@dataclass
class Event:
    wall_time: float = 0.0
    step: int = 0
    session_start: bool = False
    has_summary: bool = False
    values: list[Value] = field(default_factory=list)


def decode_event(buf: bytes) -> Event | None:
    """The Event in ``buf``, or None when it is no Event (a checksummed record of something else)."""
    try:
        return _event(buf, 0, len(buf))
    except (IndexError, ValueError, UnicodeDecodeError, struct.error):
        return None


def _event(buf: bytes, i: int, end: int) -> Event:
    event = Event()
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x09:  # wall_time, double
            event.wall_time = _unpack_f64(buf, i)[0]
            i += 8
        elif key == 0x10:  # step, int64 varint
            step, i = read_varint(buf, i)
            event.step = step - (1 << 64) if step >= 1 << 63 else step
        elif key == 0x2A:  # summary
            length, i = read_varint(buf, i)
            event.has_summary = True
            _summary(buf, i, i + length, event.values)
            i += length
        elif key == 0x3A:  # session_log
            length, i = read_varint(buf, i)
            event.session_start = _session_status(buf, i, i + length) == _SESSION_START
            i += length
        else:
            i = skip_field(buf, i, key)
    if i != end:
        raise ValueError("field runs past the record")
    return event


def _summary(buf: bytes, i: int, end: int, values: list[Value]) -> None:
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x0A:  # Summary.value
            length, i = read_varint(buf, i)
            values.append(decode_value(buf, i, i + length))
            i += length
        else:
            i = skip_field(buf, i, key)


def decode_value(buf: bytes, i: int, end: int) -> Value:
    """One ``Summary.Value`` from ``buf[i:end]``."""
    value = Value("")
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x0A:  # tag
            length, i = read_varint(buf, i)
            value.tag = buf[i : i + length].decode("utf-8", "replace")
            i += length
        elif key == 0x15:  # simple_value, float
            value.simple_value = _unpack_f32(buf, i)[0]
            i += 4
        elif key == 0x42:  # tensor
            length, i = read_varint(buf, i)
            value.tensor = bytes(buf[i : i + length])
            i += length
        elif key == 0x4A:  # metadata
            length, i = read_varint(buf, i)
            value.has_metadata = True
            _metadata(buf, i, i + length, value)
            i += length
        else:
            i = skip_field(buf, i, key)
    return value


def _metadata(buf: bytes, i: int, end: int, value: Value) -> None:
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x0A:  # plugin_data
            length, i = read_varint(buf, i)
            j, stop = i, i + length
            while j < stop:
                inner, j = read_key(buf, j)
                if inner in (0x0A, 0x12):  # plugin_name, content
                    size, j = read_varint(buf, j)
                    if inner == 0x0A:
                        value.plugin_name = buf[j : j + size].decode("utf-8", "replace")
                    else:
                        value.plugin_content = bytes(buf[j : j + size])
                    j += size
                else:
                    j = skip_field(buf, j, inner)
            i = stop
        elif key == 0x20:  # data_class
            value.data_class, i = read_varint(buf, i)
        else:
            i = skip_field(buf, i, key)


def _session_status(buf: bytes, i: int, end: int) -> int:
    status = 0
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x08:
            status, i = read_varint(buf, i)
        else:
            i = skip_field(buf, i, key)
    return status


def tensor_array(tensor: bytes) -> tuple[int, tuple[int, ...], bytes]:
    """``(dtype, shape, tensor_content)`` of a raw TensorProto (content empty when the values are in
    typed fields instead)."""
    dtype, dims, content = 0, [], b""
    i, end = 0, len(tensor)
    while i < end:
        key, i = read_key(tensor, i)
        if key == 0x08:  # dtype
            dtype, i = read_varint(tensor, i)
        elif key == 0x12:  # tensor_shape
            length, i = read_varint(tensor, i)
            dims = _dims(tensor, i, i + length)
            i += length
        elif key == 0x22:  # tensor_content
            length, i = read_varint(tensor, i)
            content = tensor[i : i + length]
            i += length
        else:
            i = skip_field(tensor, i, key)
    return dtype, tuple(dims), content


def _dims(buf: bytes, i: int, end: int) -> list[int]:
    dims = []
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x12:  # dim
            length, i = read_varint(buf, i)
            j, stop, size = i, i + length, 0
            while j < stop:
                inner, j = read_key(buf, j)
                if inner == 0x08:
                    size, j = read_varint(buf, j)
                else:
                    j = skip_field(buf, j, inner)
            dims.append(size)
            i = stop
        else:
            i = skip_field(buf, i, key)
    return dims


def tensor_strings(tensor: bytes) -> list[bytes]:
    """The ``string_val`` entries of a raw TensorProto (a text summary's)."""
    strings, i, end = [], 0, len(tensor)
    while i < end:
        key, i = read_key(tensor, i)
        if key == 0x42:  # string_val
            length, i = read_varint(tensor, i)
            strings.append(tensor[i : i + length])
            i += length
        else:
            i = skip_field(tensor, i, key)
    return strings
