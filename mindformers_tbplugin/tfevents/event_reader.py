"""Fast, incremental reading of scalar points from any TensorBoard event file.

Decodes just the protobuf fields a scalar needs (``Event.wall_time``, ``Event.step``,
``Summary.Value.tag`` and either ``simple_value`` or a one-element scalar ``tensor``) straight from
the file's bytes, skipping everything else by its wire type. Reads in bounded chunks and remembers
its offset, so each call returns only what was appended since the last one, memory stays flat
however long the file is, and a half-written last record is simply read on a later call.

Scalars written by this package, tensorboardX, ``torch.utils.tensorboard`` (``simple_value``) and
TensorFlow 2 / tensorboardX ``new_style`` (tensor with the ``scalars`` plugin or data class) are
recognised; images, histograms, text and other tensors are skipped.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Container, Iterator
from dataclasses import dataclass
from itertools import chain, islice, repeat
from pathlib import Path

from mindformers_tbplugin.log import logger

try:
    from google_crc32c import value as _crc32c
except ImportError:  # pragma: no cover - the wheel is a dependency; pure Python is ~100x slower
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as _crc32c

CHUNK_BYTES = 1 << 20
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_unpack_u64 = struct.Struct("<Q").unpack_from
_unpack_u32 = struct.Struct("<I").unpack_from
_unpack_f32 = struct.Struct("<f").unpack_from
_unpack_f64 = struct.Struct("<d").unpack_from

# TensorProto dtypes we can read as a number: dtype -> (struct format, bytes per element).
_DTYPE_FORMATS = {1: ("<f", 4), 2: ("<d", 8), 3: ("<i", 4), 9: ("<q", 8), 10: ("<?", 1), 19: ("<e", 2)}
_DT_BFLOAT16 = 14
_DATA_CLASS_SCALAR = 1
_SCALARS_PLUGIN = "scalars"

Point = tuple[str, int, float, float]  # tag, step, value, wall_time
MAX_TEMPLATES = 256


@dataclass(frozen=True)
class _Template:
    """The byte layout of an Event that writers repeat every step: ``wall_time``, ``step`` and a
    Summary made only of ``simple_value``s, in this order.

    ``shape`` matches such a record with its framing (keys, lengths, tag bytes) spelled out and any
    bytes where the wall time, step and floats sit; when it matches, one ``struct`` call reads the
    wall time, the step's varint bytes and the wanted floats.
    """

    shape: re.Pattern[bytes]
    layout: struct.Struct
    names: tuple[str, ...]

    @classmethod
    def of(cls, buf: bytes, start: int, step_end: int, values: list[tuple[str | None, int]]) -> _Template:
        step_bytes = step_end - start - 10
        pattern = [b"\x09.{8}\x10" + b"[\x80-\xff]" * (step_bytes - 1) + b"[\x00-\x7f]"]
        layout = [f"<xdx{step_bytes}s"]
        previous = step_end
        for name, offset in values:
            pattern.append(re.escape(buf[previous:offset]) + b".{4}")
            layout.append(f"{offset - previous}x" + ("f" if name is not None else "4x"))
            previous = offset + 4
        names = tuple(name for name, _ in values if name is not None)
        return cls(re.compile(b"".join(pattern), re.DOTALL), struct.Struct("".join(layout)), names)


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _skip(buf: bytes, i: int, key: int) -> int:
    """Index after the field whose key was just read, by its wire type."""
    wire = key & 7
    if wire == 0:
        return _varint(buf, i)[1]
    if wire == 1:
        return i + 8
    if wire == 2:
        length, i = _varint(buf, i)
        return i + length
    if wire == 5:
        return i + 4
    raise ValueError(f"unsupported protobuf wire type {wire}")


def _read_key(buf: bytes, i: int) -> tuple[int, int]:
    key = buf[i]
    return (key, i + 1) if key < 0x80 else _varint(buf, i)


class EventFileReader:
    """Reads the scalar points appended to one event file since the previous call.

    ``tags``: only these tags are returned (None: all scalar tags).
    """

    def __init__(self, path: str | os.PathLike, tags: Container[str] | None = None) -> None:
        self.path = Path(path)
        self.offset = 0
        self._tags = tags
        self._names: dict[bytes, str | None] = {}  # raw tag -> name, None when filtered out
        self._scalar_tensor_tags: dict[str, bool] = {}  # from metadata, which writers send once per tag
        self._templates: dict[int, _Template] = {}  # record length -> a layout seen with that length
        self._broken = False

    def read(self) -> Iterator[Point]:
        """Every complete new point; a torn last record is left for the next call."""
        return chain.from_iterable(self._batches())  # a C iterator: no generator step per point

    def _batches(self) -> Iterator[list[Point]]:
        """The new points, one list per chunk read."""
        if self._broken:
            return
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if size < self.offset:  # the file was replaced: start over
            self.offset = 0
        with open(self.path, "rb") as handle:
            while self.offset < size:
                handle.seek(self.offset)
                buf = handle.read(CHUNK_BYTES)
                consumed, points = self._parse_chunk(buf)
                if consumed == 0:
                    needed = self._record_size(buf)
                    if needed is None or needed <= len(buf):
                        return  # incomplete (torn) record or a corrupt header: wait / stop
                    handle.seek(self.offset)
                    buf = handle.read(needed)  # one record larger than a chunk
                    consumed, points = self._parse_chunk(buf)
                    if consumed == 0:
                        return
                self.offset += consumed
                yield points

    def _record_size(self, buf: bytes) -> int | None:
        if len(buf) < 12 or self._broken:
            return None
        return 12 + _unpack_u64(buf, 0)[0] + 4

    def _parse_chunk(self, buf: bytes) -> tuple[int, list[Point]]:
        """(bytes consumed by whole records, their points)."""
        points: list[Point] = []
        templates = self._templates
        pos, end = 0, len(buf)
        while pos + 12 <= end:
            (length,) = _unpack_u64(buf, pos)
            if _masked(_crc32c(buf[pos : pos + 8])) != _unpack_u32(buf, pos + 8)[0]:
                self._broken = True
                logger.warning("%s: corrupt record header at byte %d; ignoring the rest of the file", self.path, pos)
                break
            start = pos + 12
            stop = start + length
            if stop + 4 > end:
                break
            if _masked(_crc32c(buf[start:stop])) != _unpack_u32(buf, stop)[0]:
                logger.warning("%s: record at byte %d fails its checksum; skipped", self.path, self.offset + pos)
            elif (template := templates.get(length)) is not None and template.shape.fullmatch(buf, start, stop):
                if template.names:
                    unpacked = template.layout.unpack_from(buf, start)
                    step = _varint(unpacked[1], 0)[0]
                    if step >= 1 << 63:  # int64 stored as two's complement
                        step -= 1 << 64
                    points.extend(zip(template.names, repeat(step), islice(unpacked, 2, None), repeat(unpacked[0])))
            else:
                self._parse_event(buf, start, stop, points)
            pos = stop + 4
        return pos, points

    def _parse_event(self, buf: bytes, i: int, end: int, points: list[Point]) -> None:
        event_start = i
        step_end = -1
        wall_time, step = 0.0, 0
        summary_start = summary_end = -1
        while i < end:
            key = buf[i]
            i += 1
            if key == 0x09:  # wall_time, double
                wall_time = _unpack_f64(buf, i)[0]
                i += 8
            elif key == 0x10:  # step, varint
                step, i = _varint(buf, i)
                step_end = i
            elif key == 0x2A:  # summary
                length, i = _varint(buf, i)
                summary_start, summary_end = i, i + length
                i += length
            else:
                if key >= 0x80:
                    key, i = _varint(buf, i - 1)
                i = _skip(buf, i, key)
        if summary_start < 0:
            return
        if step >= 1 << 63:  # int64 stored as two's complement
            step -= 1 << 64
        simple_values = self._parse_summary(buf, summary_start, summary_end, step, wall_time, points)
        # Remember the layout when the event is exactly wall_time, step, summary, in this order.
        canonical = buf[event_start] == 0x09 and step_end > event_start + 10 and buf[event_start + 9] == 0x10
        canonical = canonical and buf[step_end] == 0x2A and summary_end == end
        if canonical and simple_values and len(self._templates) < MAX_TEMPLATES:
            self._templates[end - event_start] = _Template.of(buf, event_start, step_end, simple_values)

    def _parse_summary(
        self, buf: bytes, start: int, end: int, step: int, wall_time: float, points: list[Point]
    ) -> list[tuple[str | None, int]] | None:
        """Any Summary's points. Returns (name or None when filtered out, float offset) per value when
        every value is a plain ``simple_value`` (a layout worth remembering), else None."""
        simple_only = True
        simple_values: list[tuple[str | None, int]] = []  # (name or None when filtered, float offset)
        i = start
        while i < end:
            key, i = _read_key(buf, i)
            if key != 0x0A:  # Summary.value
                i = _skip(buf, i, key)
                simple_only = False
                continue
            length, i = _varint(buf, i)
            value_end = i + length
            tag_length = buf[i + 1]
            if buf[i] == 0x0A and tag_length < 0x80 and i + tag_length + 7 == value_end and buf[value_end - 5] == 0x15:
                raw_tag = buf[i + 2 : value_end - 5]
                name = self._names.get(raw_tag, "")
                if name == "":
                    name = self._learn_tag(raw_tag)
                simple_values.append((name, value_end - 4))
                if name is not None:
                    points.append((name, step, _unpack_f32(buf, value_end - 4)[0], wall_time))
            else:
                simple_only = False
                point = self._parse_value(buf, i, value_end)
                if point is not None:
                    points.append((point[0], step, point[1], wall_time))
            i = value_end
        return simple_values if simple_only else None

    def _learn_tag(self, raw_tag: bytes) -> str | None:
        decoded = raw_tag.decode("utf-8", "replace")
        name = self._names[raw_tag] = decoded if self._tags is None or decoded in self._tags else None
        return name

    def _parse_value(self, buf: bytes, i: int, end: int) -> tuple[str, float] | None:
        raw_tag = b""
        simple: float | None = None
        tensor = metadata = None
        while i < end:
            key = buf[i]
            i += 1
            if key == 0x0A:  # tag
                length, i = _varint(buf, i)
                raw_tag = buf[i : i + length]
                i += length
            elif key == 0x15:  # simple_value, float
                simple = _unpack_f32(buf, i)[0]
                i += 4
            elif key == 0x42:  # tensor
                length, i = _varint(buf, i)
                tensor = (i, i + length)
                i += length
            elif key == 0x4A:  # metadata
                length, i = _varint(buf, i)
                metadata = (i, i + length)
                i += length
            else:
                if key >= 0x80:
                    key, i = _varint(buf, i - 1)
                i = _skip(buf, i, key)
        name = self._names.get(raw_tag, "")
        if name == "":
            name = self._learn_tag(raw_tag)
        if name is None:
            return None
        if simple is not None:
            return name, simple
        if tensor is None:
            return None
        if metadata is not None:
            self._scalar_tensor_tags[name] = _is_scalar_metadata(buf, *metadata)
        if not self._scalar_tensor_tags.get(name, True):
            return None
        value = _tensor_scalar(buf, *tensor)
        return None if value is None else (name, value)


def _is_scalar_metadata(buf: bytes, i: int, end: int) -> bool:
    """SummaryMetadata says scalar: plugin ``scalars`` or data class SCALAR."""
    plugin = ""
    data_class = 0
    while i < end:
        key, i = _read_key(buf, i)
        if key == 0x0A:  # plugin_data
            length, i = _varint(buf, i)
            j, stop = i, i + length
            while j < stop:
                inner, j = _read_key(buf, j)
                if inner == 0x0A:  # plugin_name
                    size, j = _varint(buf, j)
                    plugin = buf[j : j + size].decode("utf-8", "replace")
                    j += size
                else:
                    j = _skip(buf, j, inner)
            i = stop
        elif key == 0x20:  # data_class
            data_class, i = _varint(buf, i)
        else:
            i = _skip(buf, i, key)
    return plugin == _SCALARS_PLUGIN or data_class == _DATA_CLASS_SCALAR


def _tensor_scalar(buf: bytes, i: int, end: int) -> float | None:
    """The value of a one-element numeric TensorProto, else None."""
    dtype = 0
    values: list[float] = []
    content = None
    while i < end:
        key, i = _read_key(buf, i)
        field, wire = key >> 3, key & 7
        if key == 0x08:  # dtype
            dtype, i = _varint(buf, i)
        elif key == 0x22:  # tensor_content
            length, i = _varint(buf, i)
            content = buf[i : i + length]
            i += length
        elif field in (5, 6) and wire in (1, 2, 5):  # float_val, double_val (packed or not)
            fmt, size = ("<f", 4) if field == 5 else ("<d", 8)
            i = _collect_fixed(buf, i, wire, fmt, size, values)
        elif field in (7, 10, 11, 13) and wire in (0, 2):  # int_val, int64_val, bool_val, half_val
            i = _collect_varints(buf, i, wire, values, half=field == 13)
        else:
            i = _skip(buf, i, key)
        if len(values) > 1:
            return None
    if content is not None:
        return _from_content(dtype, content)
    return values[0] if len(values) == 1 else None


def _collect_fixed(buf: bytes, i: int, wire: int, fmt: str, size: int, values: list[float]) -> int:
    if wire == 2:
        length, i = _varint(buf, i)
        values.extend(v for (v,) in struct.iter_unpack(fmt, buf[i : i + length]))
        return i + length
    values.append(struct.unpack_from(fmt, buf, i)[0])
    return i + size


def _collect_varints(buf: bytes, i: int, wire: int, values: list[float], half: bool) -> int:
    """One varint (wire 0) or a packed run of them; negative ints are sign-extended to 64 bits."""
    stop = None
    if wire == 2:
        length, i = _varint(buf, i)
        stop = i + length
    while True:
        raw, i = _varint(buf, i)
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
