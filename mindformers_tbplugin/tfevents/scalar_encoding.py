"""Protobuf wire encoding of a scalars ``Event``, without building protobuf objects.

Inside a training process MindSpore forces protobuf's pure-Python implementation, where building and
serialising one ``Event`` per logged step costs tens of microseconds of GIL time that the training
thread waits for. A scalars event is a fixed, tiny layout, so the writer thread encodes it directly:

    Event   {wall_time = 1 (double), step = 2 (int64), summary = 5 (Summary)}
    Summary {value = 1 (repeated Value)}
    Value   {tag = 1 (string), simple_value = 2 (float)}

The bytes are identical to ``event_pb2.Event(...).SerializeToString()`` (tests compare them): fields
in number order, proto3 defaults (wall_time +0.0, step 0, empty tag) omitted, ``simple_value`` always
written (it is a oneof member), floats narrowed to float32 the way protobuf narrows them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

_pack_double = struct.Struct("<d").pack
_pack_float = struct.Struct("<f").pack

_FLOAT_MAX = float.fromhex("0x1.fffffep+127")
_FLOAT_MAX_ROUNDED = 3.4028235677973366e38  # halfway to the next float32: protobuf still gives FLOAT_MAX
_INF = float("inf")
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


def varint(value: int) -> bytes:
    """Base-128 varint; negative int64 values are written as their 64-bit two's complement."""
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def float32_bytes(value: float) -> bytes:
    """``value`` as protobuf writes a ``float`` field: finite doubles beyond float32 become +-inf,
    except those that round down to the largest float32."""
    try:
        return _pack_float(value)
    except OverflowError:
        magnitude = _FLOAT_MAX if abs(value) <= _FLOAT_MAX_ROUNDED else _INF
        return _pack_float(magnitude if value > 0 else -magnitude)


def _value_head(tag: str) -> bytes:
    head = _value_heads.get(tag)
    if head is None:
        encoded = tag.encode("utf-8")
        tag_field = _TAG + varint(len(encoded)) + encoded if encoded else b""
        head = _VALUE + varint(len(tag_field) + 5) + tag_field + _SIMPLE_VALUE
        if len(_value_heads) < _MAX_CACHED_TAGS:  # bounded: a run that invents tags must not grow memory
            _value_heads[tag] = head
    return head


def encode_scalars_event(step: int, wall_time: float, values: Mapping[str, float]) -> bytes:
    """The serialised ``Event`` holding one ``Summary`` with a ``simple_value`` per tag."""
    summary = b"".join([_value_head(tag) + float32_bytes(value) for tag, value in values.items()])
    wall = _pack_double(wall_time)
    parts = [_WALL_TIME + wall] if wall != _ZERO_DOUBLE else []  # -0.0 is not the default: written
    if step:
        parts.append(_STEP + varint(step))
    parts.append(_SUMMARY + varint(len(summary)) + summary)
    return b"".join(parts)
