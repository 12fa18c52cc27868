"""Protobuf's wire format both ways, without protobuf objects: varints, float narrowing, skipping a
field by its wire type, and the value of a scalar held in a ``TensorProto``.

The writer encodes scalars and ``mftb watch`` decodes them with these, because protobuf objects cost
too much there (see :mod:`.events` and :mod:`.reader`).
"""

from __future__ import annotations

import struct

_pack_float = struct.Struct("<f").pack
_FLOAT_MAX = float.fromhex("0x1.fffffep+127")
_FLOAT_MAX_ROUNDED = 3.4028235677973366e38  # halfway to the next float32: protobuf still gives FLOAT_MAX
_INF = float("inf")

# TensorProto dtypes we can read as a number: dtype -> (struct format, bytes per element).
_DTYPE_FORMATS = {1: ("<f", 4), 2: ("<d", 8), 3: ("<i", 4), 9: ("<q", 8), 10: ("<?", 1), 19: ("<e", 2)}
_DT_BFLOAT16 = 14


def encode_varint(value: int) -> bytes:
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


def read_varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def skip_field(buf: bytes, i: int, key: int) -> int:
    """Index after the field whose key was just read, by its wire type."""
    wire = key & 7
    if wire == 0:
        return read_varint(buf, i)[1]
    if wire == 1:
        return i + 8
    if wire == 2:
        length, i = read_varint(buf, i)
        return i + length
    if wire == 5:
        return i + 4
    raise ValueError(f"unsupported protobuf wire type {wire}")


def read_key(buf: bytes, i: int) -> tuple[int, int]:
    key = buf[i]
    return (key, i + 1) if key < 0x80 else read_varint(buf, i)


def tensor_scalar(buf: bytes, i: int, end: int) -> float | None:
    """The value of a one-element numeric TensorProto, else None."""
    dtype = 0
    values: list[float] = []
    content = None
    while i < end:
        key, i = read_key(buf, i)
        field, wire = key >> 3, key & 7
        if key == 0x08:  # dtype
            dtype, i = read_varint(buf, i)
        elif key == 0x22:  # tensor_content
            length, i = read_varint(buf, i)
            content = buf[i : i + length]
            i += length
        elif field in (5, 6) and wire in (1, 2, 5):  # float_val, double_val (packed or not)
            fmt, size = ("<f", 4) if field == 5 else ("<d", 8)
            i = _collect_fixed(buf, i, wire, fmt, size, values)
        elif field in (7, 10, 11, 13) and wire in (0, 2):  # int_val, int64_val, bool_val, half_val
            i = _collect_varints(buf, i, wire, values, half=field == 13)
        else:
            i = skip_field(buf, i, key)
        if len(values) > 1:
            return None
    if content is not None:
        return _from_content(dtype, content)
    return values[0] if len(values) == 1 else None


def _collect_fixed(buf: bytes, i: int, wire: int, fmt: str, size: int, values: list[float]) -> int:
    if wire == 2:
        length, i = read_varint(buf, i)
        values.extend(v for (v,) in struct.iter_unpack(fmt, buf[i : i + length]))
        return i + length
    values.append(struct.unpack_from(fmt, buf, i)[0])
    return i + size


def _collect_varints(buf: bytes, i: int, wire: int, values: list[float], half: bool) -> int:
    """One varint (wire 0) or a packed run of them; negative ints are sign-extended to 64 bits."""
    stop = None
    if wire == 2:
        length, i = read_varint(buf, i)
        stop = i + length
    while True:
        raw, i = read_varint(buf, i)
        if half:
            values.append(struct.unpack("<e", struct.pack("<H", raw & 0xFFFF))[0])
        else:
            values.append(float(raw - (1 << 64) if raw >= 1 << 63 else raw))
        if stop is None or i >= stop:
            return i


def _from_content(dtype: int, content: bytes) -> float | None:
    if dtype == _DT_BFLOAT16 and len(content) == 2:
        return struct.unpack("<f", b"\x00\x00" + content)[0]
    fmt = _DTYPE_FORMATS.get(dtype)
    if fmt is None or len(content) != fmt[1]:
        return None
    return float(struct.unpack(fmt[0], content)[0])
