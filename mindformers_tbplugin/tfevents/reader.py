"""Reading event files back, for ``mftb watch`` (scalar points, fast and incremental) and for
``mftb doctor`` (a per-file summary: damage, restarts, steps, points per tag).

Both read through :class:`~.records.RecordReader`, in bounded chunks: memory stays flat whatever the
file size, and each pass reads only what was appended since the previous one.

The watch reader decodes just the protobuf fields a scalar needs (``Event.wall_time``,
``Event.step``, ``Summary.Value.tag`` and either ``simple_value`` or a one-element scalar
``tensor``) straight from the bytes, skipping everything else by its wire type: parsing protobuf
objects would cost most of its speed (>= 10x TensorBoard's EventAccumulator, see
benchmarks/watch_throughput.py). Scalars written by this package, tensorboardX,
``torch.utils.tensorboard`` (``simple_value``) and TensorFlow 2 / tensorboardX ``new_style`` (tensor
with the ``scalars`` plugin or data class) are recognised; images, histograms, text and other
tensors are skipped.
"""

from __future__ import annotations

import os
import re
import struct
from collections import Counter
from collections.abc import Container, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice, repeat
from pathlib import Path

import numpy as np

from mindformers_tbplugin.log import logger
from mindformers_tbplugin.tfevents.decode import decode_event, decode_value
from mindformers_tbplugin.tfevents.records import CORRUPT, FOOTER_BYTES, HEADER_BYTES, RecordReader
from mindformers_tbplugin.tfevents.wire import read_key, read_varint, skip_field, tensor_scalar

_unpack_f32 = struct.Struct("<f").unpack_from
_unpack_f64 = struct.Struct("<d").unpack_from

Point = tuple[str, int, float, float]  # tag, step, value, wall_time
MAX_TEMPLATES = 256
MIN_COLUMNS = 64  # consecutive records of one layout decoded at once
# events.out.tfevents.<stamp>.<host>[.<pid>.<serial>][suffix]; torch/mftb add the pid, tensorboardX does not.
_NAME = re.compile(r"\.tfevents\.(\d+)\.(.+?)(?:\.(\d+)\.(\d+))?(\.[^.\d][^.]*)?$")
MAX_KEPT_JUMPS = 20


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
    step_bytes: int
    offsets: tuple[int, ...]  # of the named floats, from the record's start
    fixed: np.ndarray  # which bytes every record of the layout repeats: all but wall time, step and floats
    expected: np.ndarray  # the record the layout was learnt from

    @classmethod
    def of(cls, buf: bytes, start: int, end: int, step_end: int, values: list[tuple[str | None, int]]) -> _Template:
        step_bytes = step_end - start - 10
        pattern = [b"\x09.{8}\x10" + b"[\x80-\xff]" * (step_bytes - 1) + b"[\x00-\x7f]"]
        layout = [f"<xdx{step_bytes}s"]
        previous = step_end
        for name, offset in values:
            pattern.append(re.escape(buf[previous:offset]) + b".{4}")
            layout.append(f"{offset - previous}x" + ("f" if name is not None else "4x"))
            previous = offset + 4
        names = tuple(name for name, _ in values if name is not None)
        offsets = tuple(offset - start for name, offset in values if name is not None)
        fixed = np.ones(end - start, dtype=bool)
        fixed[1:9] = fixed[10 : step_end - start] = False
        for _, offset in values:
            fixed[offset - start : offset - start + 4] = False
        expected = np.frombuffer(buf, np.uint8, end - start, start).copy()
        shape = re.compile(b"".join(pattern), re.DOTALL)
        return cls(shape, struct.Struct("".join(layout)), names, step_bytes, offsets, fixed, expected)

    def columns(self, buf: bytes, start: int, count: int) -> Columns | None:
        """The points of ``count`` records of this layout's length following each other from ``start``
        (their checksums checked), decoded at once; None when one of them has another layout."""
        width = len(self.expected)
        framed = np.frombuffer(buf, np.uint8, count * (HEADER_BYTES + width + FOOTER_BYTES), start - HEADER_BYTES)
        rows = framed.reshape(count, -1)[:, HEADER_BYTES : HEADER_BYTES + width]
        last = 10 + self.step_bytes - 1  # the step varint's last byte: high bit clear, the others' set
        if not (rows[:, self.fixed] == self.expected[self.fixed]).all() or not (rows[:, last] < 0x80).all():
            return None
        if not (rows[:, 10:last] >= 0x80).all():
            return None
        steps = np.zeros(count, dtype=np.uint64)
        for k in range(self.step_bytes):
            steps |= (rows[:, 10 + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        walls = np.ascontiguousarray(rows[:, 1:9]).view("<f8").ravel()
        values = [np.ascontiguousarray(rows[:, at : at + 4]).view("<f4").ravel().tolist() for at in self.offsets]
        return Columns(self.names, steps.view(np.int64).tolist(), walls.tolist(), values)


@dataclass(frozen=True)
class Columns:
    """The points of consecutive records of one layout: per record a step and a wall time, per name
    one value per record."""

    names: tuple[str, ...]
    steps: list[int]
    walls: list[float]
    values: list[list[float]]

    def points(self) -> list[Point]:
        points: list[Point] = []
        for step, wall, *row in zip(self.steps, self.walls, *self.values, strict=True):
            points.extend(zip(self.names, repeat(step), row, repeat(wall)))
        return points


class EventFileReader:
    """Reads the scalar points appended to one event file since the previous call.

    ``tags``: only these tags are returned (None: all scalar tags).
    """

    def __init__(self, path: str | os.PathLike, tags: Container[str] | None = None) -> None:
        self._records = RecordReader(path)
        self.path = self._records.path
        self._tags = tags
        self._names: dict[bytes, str | None] = {}  # raw tag -> name, None when filtered out
        self._scalar_tensor_tags: dict[str, bool] = {}  # from metadata, which writers send once per tag
        self._templates: dict[int, _Template] = {}  # record length -> a layout seen with that length
        self.bad_records: list[int] = []  # file offsets of records failing their checksum (skipped)

    @property
    def offset(self) -> int:
        """Where the next call starts reading: the end of the last complete record."""
        return self._records.offset

    @property
    def problem(self) -> str | None:
        """What follows ``offset``: None (the end of the file), TORN or CORRUPT (see RecordReader)."""
        return self._records.problem

    def read(self) -> Iterator[Point]:
        """Every complete new point; a torn last record is left for the next call."""
        return chain.from_iterable(self._batches())  # a C iterator: no generator step per point

    def _batches(self) -> Iterator[list[Point]]:
        """The new points, one list per chunk read (or per run of one layout)."""
        for block in self.blocks():
            yield block.points() if isinstance(block, Columns) else block

    def blocks(self) -> Iterator[list[Point] | Columns]:
        """The new points in file order: runs of at least ``MIN_COLUMNS`` consecutive records of a
        remembered layout as :class:`Columns`, decoded at once with numpy; the rest as lists."""
        records = self._records
        if records.problem == CORRUPT:
            return
        templates = self._templates
        for base, buf, spans in records.chunks():
            points: list[Point] = []
            i, count = 0, len(spans)
            while i < count:
                start, stop, intact = spans[i]
                length = stop - start
                template = templates.get(length) if intact else None
                j = i + 1
                if template is not None:
                    while j < count and spans[j][2] and spans[j][1] - spans[j][0] == length:
                        j += 1
                    columns = None
                    if j - i >= MIN_COLUMNS:
                        columns = template.columns(buf, start, j - i)
                    if columns is not None:
                        if points:
                            yield points
                            points = []
                        yield columns
                        i = j
                        continue
                for start, stop, intact in spans[i:j]:
                    self._one(base, buf, start, stop, intact, points)
                i = j
            if points:
                yield points
        if records.problem == CORRUPT:
            logger.warning(
                "%s: corrupt record header at byte %d; ignoring the rest of the file", self.path, records.offset
            )

    def _one(self, base: int, buf: bytes, start: int, stop: int, intact: bool, points: list[Point]) -> None:
        """One record's points, by its remembered layout or parsed."""
        if not intact:
            self.bad_records.append(base + start - HEADER_BYTES)
            logger.warning("%s: record at byte %d fails its checksum; skipped", self.path, base + start - HEADER_BYTES)
        elif (template := self._templates.get(stop - start)) is not None and template.shape.fullmatch(buf, start, stop):
            if template.names:
                unpacked = template.layout.unpack_from(buf, start)
                step = read_varint(unpacked[1], 0)[0]
                if step >= 1 << 63:  # int64 stored as two's complement
                    step -= 1 << 64
                points.extend(zip(template.names, repeat(step), islice(unpacked, 2, None), repeat(unpacked[0])))
        else:
            self._parse_event(buf, start, stop, points)

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
                step, i = read_varint(buf, i)
                step_end = i
            elif key == 0x2A:  # summary
                length, i = read_varint(buf, i)
                summary_start, summary_end = i, i + length
                i += length
            else:
                if key >= 0x80:
                    key, i = read_varint(buf, i - 1)
                i = skip_field(buf, i, key)
        if summary_start < 0:
            return
        if step >= 1 << 63:  # int64 stored as two's complement
            step -= 1 << 64
        simple_values = self._parse_summary(buf, summary_start, summary_end, step, wall_time, points)
        # Remember the layout when the event is exactly wall_time, step, summary, in this order.
        canonical = buf[event_start] == 0x09 and step_end > event_start + 10 and buf[event_start + 9] == 0x10
        canonical = canonical and buf[step_end] == 0x2A and summary_end == end
        if canonical and simple_values and len(self._templates) < MAX_TEMPLATES:
            self._templates[end - event_start] = _Template.of(buf, event_start, end, step_end, simple_values)

    def _parse_summary(
        self, buf: bytes, start: int, end: int, step: int, wall_time: float, points: list[Point]
    ) -> list[tuple[str | None, int]] | None:
        """Any Summary's points. Returns (name or None when filtered out, float offset) per value when
        every value is a plain ``simple_value`` (a layout worth remembering), else None."""
        simple_only = True
        simple_values: list[tuple[str | None, int]] = []  # (name or None when filtered, float offset)
        i = start
        while i < end:
            key, i = read_key(buf, i)
            if key != 0x0A:  # Summary.value
                i = skip_field(buf, i, key)
                simple_only = False
                continue
            length, i = read_varint(buf, i)
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
        value = decode_value(buf, i, end)
        raw_tag = value.tag.encode("utf-8")
        name = self._names.get(raw_tag, "")
        if name == "":
            name = self._learn_tag(raw_tag)
        if name is None:
            return None
        if value.simple_value is not None:
            return name, value.simple_value
        if value.tensor is None:
            return None
        if value.has_metadata:  # writers send it with a tag's first point only
            self._scalar_tensor_tags[name] = value.is_scalar
        if not self._scalar_tensor_tags.get(name, True):
            return None
        point = tensor_scalar(value.tensor, 0, len(value.tensor))
        return None if point is None else (name, point)


@dataclass(frozen=True)
class Backstep:
    """A tag's step lower than its previous one, with no ``SessionLog.START`` purging the earlier points."""

    path: Path
    tag: str
    from_step: int
    to_step: int


@dataclass
class StepTracker:
    """Each tag's last step across a run's files, as TensorBoard orders them.

    Steps are compared per tag: tags may use different x axes (``train/loss_vs_samples`` counts samples).
    A ``SessionLog.START`` at step p makes TensorBoard drop every tag's points at or after p.
    """

    last: dict[str, int] = field(default_factory=dict)
    jumps: list[Backstep] = field(default_factory=list)  # the first MAX_KEPT_JUMPS, to show
    jump_count: int = 0

    def start(self, step: int) -> None:
        for tag, last in self.last.items():
            if last >= step:
                self.last[tag] = step - 1

    def see(self, path: Path, tag: str, step: int) -> None:
        previous = self.last.get(tag)
        if previous is not None and step < previous:
            self.jump_count += 1
            if len(self.jumps) < MAX_KEPT_JUMPS:
                self.jumps.append(Backstep(path, tag, previous, step))
        self.last[tag] = step


@dataclass
class FileScan:
    """What ``mftb doctor`` needs of one file, gathered in one streaming pass."""

    path: Path
    size: int
    mtime: float
    records: int = 0
    valid_bytes: int = 0  # everything up to here is complete, checksummed records
    problem: str | None = None  # TORN (ends mid-record) or CORRUPT (a checksum does not match)
    min_step: int | None = None
    max_step: int | None = None
    first_wall: float | None = None
    last_wall: float | None = None
    starts: list[int] = field(default_factory=list)  # steps of SessionLog.START events
    points: Counter[str] = field(default_factory=Counter)  # scalar points per tag

    @property
    def writer(self) -> str:
        """Who wrote the file, from its name: ``host pid N`` when the name carries a pid, else ``host``."""
        match = _NAME.search(self.path.name)
        if match is None:
            return self.path.name
        host, pid = match.group(2), match.group(3)
        return f"{host} pid {pid}" if pid else host


def scan_file(path: Path, steps: StepTracker | None = None) -> FileScan:
    """Summarize one event file; ``steps`` (shared by the run's files, in order) collects steps going back."""
    stat = path.stat()
    scan = FileScan(path, stat.st_size, stat.st_mtime)
    steps = steps if steps is not None else StepTracker()
    records = RecordReader(path)
    for base, buf, spans in records.chunks():
        intact = next((i for i, span in enumerate(spans) if not span[2]), len(spans))
        for start, stop, _ in spans[:intact]:
            scan.records += 1
            scan.valid_bytes = base + stop + FOOTER_BYTES
            _summarize(scan, steps, buf[start:stop])
        if intact < len(spans):  # TensorBoard stops reading a file at its first bad checksum
            scan.problem = CORRUPT
            break
    else:
        scan.problem = records.problem
    return scan


def _summarize(scan: FileScan, steps: StepTracker, payload: bytes) -> None:
    event = decode_event(payload)
    if event is None:  # a checksummed record that is no Event: not ours to judge
        return
    if event.wall_time:
        scan.first_wall = scan.first_wall or event.wall_time
        scan.last_wall = event.wall_time
    if event.session_start:
        scan.starts.append(event.step)
        steps.start(event.step)
        return
    if not event.has_summary:
        return
    step = event.step
    for value in event.values:
        if value.simple_value is not None or value.plugin_name == "scalars":
            scan.points[value.tag] += 1
        steps.see(scan.path, value.tag, step)
    scan.min_step = step if scan.min_step is None else min(scan.min_step, step)
    scan.max_step = step if scan.max_step is None else max(scan.max_step, step)
