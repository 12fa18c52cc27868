"""tfevents/wire.py: protobuf's wire format without protobuf objects, held to protobuf's own
serialisation of TensorBoard's protos: varints both ways (negative int64 as 64-bit two's complement),
float narrowing, skipping a field of every wire type, multi-byte keys, and the value of a one-element
``TensorProto`` of every dtype a scalar comes in, as TensorBoard's ``tensor_util`` reads it."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.util import tensor_util

from mindformers_tbplugin.tfevents.wire import (
    encode_varint,
    float32_bytes,
    read_key,
    read_varint,
    skip_field,
    tensor_scalar,
)

FLOAT_MAX = float.fromhex("0x1.fffffep+127")
INT64_VALUES = [1, 127, 128, 300, 16_383, 16_384, 2**31, 2**63 - 1, -1, -128, -(2**63)]


@pytest.mark.parametrize("value", INT64_VALUES)
def test_varints_are_protobufs_int64_bytes_and_read_back(value: int) -> None:
    # Event.step is an int64 field (number 2, wire type 0): its key byte is 0x10, then the varint.
    serialised = event_pb2.Event(step=value).SerializeToString()
    assert serialised == b"\x10" + encode_varint(value)
    # Reading gives the unsigned 64-bit value (negative steps: their two's complement) and the index after it.
    assert read_varint(serialised, 1) == (value % (1 << 64), len(serialised))


def test_a_negative_varint_takes_ten_bytes() -> None:
    # 64 bits in groups of 7: nine full groups and the top bit alone.
    assert encode_varint(-1) == b"\xff" * 9 + b"\x01"
    assert encode_varint(0) == b"\x00"


@pytest.mark.parametrize(
    "value",
    [1.0, -2.5, 1e-45, 1e-50, 2.0**24 + 1, FLOAT_MAX, 3.4028235677973366e38, 3.4028235677973367e38, 1e300, -1e300],
)
def test_float_narrowing_is_protobufs(value: float) -> None:
    # Summary.Value.simple_value is a float field (number 2, wire type 5): key 0x15, then four bytes.
    serialised = summary_pb2.Summary.Value(simple_value=value).SerializeToString()
    assert serialised == b"\x15" + float32_bytes(value)


def test_beyond_float32_is_infinite_except_what_rounds_down_to_float32_max() -> None:
    assert struct.unpack("<f", float32_bytes(3.4028235677973366e38))[0] == FLOAT_MAX
    assert struct.unpack("<f", float32_bytes(-3.4028235677973366e38))[0] == -FLOAT_MAX
    assert struct.unpack("<f", float32_bytes(1e39))[0] == math.inf
    assert struct.unpack("<f", float32_bytes(-1e39))[0] == -math.inf
    assert math.isnan(struct.unpack("<f", float32_bytes(math.nan))[0])


def test_skip_field_steps_over_each_wire_type_of_a_real_event() -> None:
    # wall_time: double (wire 1), step: int64 (wire 0), file_version: string (wire 2); then a Summary.Value's
    # simple_value: float (wire 5). Skipping each lands exactly on the next key.
    event = event_pb2.Event(wall_time=1.5, step=300, file_version="brain.Event:2").SerializeToString()
    keys, i = [], 0
    while i < len(event):
        key, i = read_key(event, i)
        keys.append(key)
        i = skip_field(event, i, key)
    assert keys == [0x09, 0x10, 0x1A] and i == len(event)
    value = summary_pb2.Summary.Value(tag="t", simple_value=2.0).SerializeToString()
    key, i = read_key(value, 0)
    i = skip_field(value, i, key)  # the tag
    key, i = read_key(value, i)
    assert key == 0x15 and skip_field(value, i, key) == len(value)


@pytest.mark.parametrize("wire", [3, 4, 6, 7])
def test_group_and_unknown_wire_types_are_refused(wire: int) -> None:
    with pytest.raises(ValueError, match=f"unsupported protobuf wire type {wire}"):
        skip_field(b"\x00" * 8, 0, (1 << 3) | wire)


def test_a_key_of_a_field_number_from_16_takes_two_bytes() -> None:
    # A key is the varint (field << 3) | wire: one byte up to field 15 (half_val, 13: 0x68), two from 16 on.
    key = encode_varint((16 << 3) | 0)
    assert key == b"\x80\x01"
    assert read_key(key + b"\x05", 0) == (128, 2)
    assert read_key(b"\x68\x05", 0) == (0x68, 1)


def _scalar_of(tensor: tensor_pb2.TensorProto) -> float | None:
    buf = tensor.SerializeToString()
    return tensor_scalar(buf, 0, len(buf))


def _tensorboard_reads(tensor: tensor_pb2.TensorProto) -> float:
    return float(tensor_util.make_ndarray(tensor).item())


@pytest.mark.parametrize(
    "tensor",
    [
        tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[0.25]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, double_val=[1e-300]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, int_val=[-7]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64, int64_val=[-(2**40)]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_BOOL, bool_val=[True]),
        # half_val holds a float16's bits as an int: 0x3E00 is 1.5.
        tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, half_val=[0x3E00]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=np.float32(-3.5).tobytes()),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_content=np.float64(math.pi).tobytes()),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, tensor_content=np.int32(-2).tobytes()),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64, tensor_content=np.int64(2**53 + 1).tobytes()),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_BOOL, tensor_content=np.bool_(True).tobytes()),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, tensor_content=np.float16(0.1).tobytes()),
    ],
    ids=lambda t: f"{types_pb2.DataType.Name(t.dtype)}-{'content' if t.tensor_content else 'values'}",
)
def test_a_one_element_tensor_reads_as_tensorboard_reads_it(tensor: tensor_pb2.TensorProto) -> None:
    assert _scalar_of(tensor) == _tensorboard_reads(tensor)


def test_bfloat16_content_is_the_upper_half_of_a_float32() -> None:
    # 1.5 as float32 is 0x3FC00000; as bfloat16 0x3FC0, little-endian.
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, tensor_content=b"\xc0\x3f")
    assert _scalar_of(tensor) == 1.5


def test_unpacked_repeated_values_read_like_packed_ones() -> None:
    # Protobuf writes repeated numbers packed (one length-delimited field) but accepts them one field each;
    # float_val (5) as wire type 5, int64_val (10) as wire type 0, double_val (6) as wire type 1.
    dtype = b"\x08" + encode_varint(types_pb2.DT_FLOAT)
    cases = {
        dtype + b"\x2d" + struct.pack("<f", 0.5): 0.5,
        b"\x08" + encode_varint(types_pb2.DT_INT64) + b"\x50" + encode_varint(-3): -3.0,
        b"\x08" + encode_varint(types_pb2.DT_DOUBLE) + b"\x31" + struct.pack("<d", 0.1): 0.1,
    }
    for buf, expected in cases.items():
        assert _tensorboard_reads(tensor_pb2.TensorProto.FromString(buf)) == expected
        assert tensor_scalar(buf, 0, len(buf)) == expected


def test_the_read_stops_at_end_and_starts_at_i() -> None:
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[2.0]).SerializeToString()
    framed = b"\xaa\xbb" + tensor + b"\x2d" + struct.pack("<f", 9.0)  # a second float_val after ``end``
    assert tensor_scalar(framed, 2, 2 + len(tensor)) == 2.0


@pytest.mark.parametrize(
    "tensor",
    [
        tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0, 2.0]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, int_val=[1, 2, 3]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=np.zeros(2, np.float32).tobytes()),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"1.0"]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_UINT8, tensor_content=b"\x01"),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT),
    ],
    ids=["two floats", "three ints", "two in content", "string", "uint8", "empty"],
)
def test_what_is_no_numeric_scalar_is_none(tensor: tensor_pb2.TensorProto) -> None:
    assert _scalar_of(tensor) is None
