"""MindSpore summary files (``SummaryRecord``, ``SummaryCollector``, ``*.summary.*``), which TensorBoard
does not read and MindInsight (their viewer) no longer supports, decoded without MindSpore.

The layout, from MindSpore's ``summary.proto`` (package ``mindspore.irpb``) and its writer
(mindspore/train/summary/): TFRecord framing, as event files; a first ``Event`` whose ``version`` is
``MindSpore.Event:1``; then ``Event {wall_time 1 double, step 2 int64, version 3, graph_def 4,
summary 5, explain 6}`` with ``Summary.Value {tag 1, scalar_value 3 float, image 4, tensor 8,
histogram 9, loss_landscape 10}``; ``Image {height 1, width 2, colorspace 3, encoded_image 4}``;
``Histogram {buckets 1 {left 1, width 2 doubles, count 3}, nan_count 2, pos_inf_count 3,
neg_inf_count 4, max 5, min 6, sum 7 doubles, count 8}``; ``TensorProto`` (anf_ir.proto) ``{dims 1,
data_type 2, float_data 3, int32_data 4, int64_data 5, double_data 6, uint64_data 7, raw_data 8}``.
Lineage files (``*_lineage``) hold ``LineageEvent {wall_time 1, step 2, version 3, train_lineage 6,
evaluation_lineage 7, dataset_graph 9, user_defined_info 10}`` records.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

from mindformers_tbplugin.imports.imported_run import Histogram, ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline import metrics as m
from mindformers_tbplugin.tfevents.records import CORRUPT, HEADER_BYTES, RecordReader, split_records
from mindformers_tbplugin.tfevents.wire import read_key, read_varint, skip_field

NAME = "mindspore-summary"
_VERSION = b"MindSpore.Event:"
_LINEAGE_KEYS = (0x32, 0x3A, 0x4A, 0x52)  # LineageEvent's train/evaluation lineage, dataset graph, user info
_unpack_f64 = struct.Struct("<d").unpack_from
_unpack_f32 = struct.Struct("<f").unpack_from
# SummaryCollector's loss, and the names users give their ScalarSummary ops in the articles.
TAGS = {"loss/auto": m.TRAIN_LOSS, "loss": m.TRAIN_LOSS, "learning_rate": m.TRAIN_LR, "lr": m.TRAIN_LR}
# Repeated numeric TensorProto fields: field -> (struct format, wire type when not packed).
_TENSOR_FIELDS = {3: ("<f", 5), 6: ("<d", 1), 4: (None, 0), 5: (None, 0), 7: (None, 0)}


def _first_record(head: bytes) -> bytes | None:
    if len(head) < HEADER_BYTES:
        return None
    length = struct.unpack_from("<Q", head)[0]
    spans, _, _ = split_records(head[: HEADER_BYTES + length + 4])
    if not spans or not spans[0][2]:
        return None
    return head[spans[0][0] : spans[0][1]]


def _is_lineage(payload: bytes) -> bool:
    """A ``LineageEvent``: its wall time, maybe a step, then lineage content."""
    if len(payload) < 10 or payload[0] != 0x09:
        return False
    i = 9
    if payload[i] == 0x10:
        _, i = read_varint(payload, i + 1)
    return i < len(payload) and payload[i] in _LINEAGE_KEYS


def sniff(path: Path, head: bytes) -> bool:
    payload = _first_record(head)
    return payload is not None and (_VERSION in payload or _is_lineage(payload))


def read(files: list[Path]) -> ImportedRun:
    """The scalars, histograms, images and one-element tensors of one folder's summary files."""
    run = ImportedRun(source=list(files), format=NAME)
    dropped: Counter[str] = Counter()
    stops: list[str] = []
    for path in files:
        with open(path, "rb") as handle:
            payload = _first_record(handle.read(1 << 16))
        if payload is None or _VERSION not in payload:
            run.skipped.append(f"{path.name}: lineage (MindInsight's training lineage)")
            continue
        records = RecordReader(path)
        for base, buf, spans in records.chunks():
            for start, stop, intact in spans:
                if intact:
                    _event(run, buf, start, stop, dropped)
                else:
                    at = base + start - HEADER_BYTES
                    stops.append(f"{path.name}: record at byte {at} fails its checksum, skipped")
        if records.problem is not None:
            how = "a corrupt record header" if records.problem == CORRUPT else "the middle of a record"
            stops.append(f"{path}: stops at byte {records.offset} ({how}); what precedes is imported")
    run.skipped.extend(f"{what}: {count} record{'s' * (count > 1)}" for what, count in sorted(dropped.items()))
    run.stopped_at = "; ".join(stops) or None
    return run


def _event(run: ImportedRun, buf: bytes, i: int, end: int, dropped: Counter[str]) -> None:
    step, wall_time, summary = 0, 0.0, None
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x09:
            wall_time = _unpack_f64(buf, i)[0]
            i += 8
        elif key == 0x10:
            step, i = read_varint(buf, i)
            step = step - (1 << 64) if step >= 1 << 63 else step
        elif key == 0x2A:
            length, i = read_varint(buf, i)
            summary = (i, i + length)
            i += length
        else:
            if key == 0x22:
                dropped["the computational graph (graph_def)"] += 1
            elif key == 0x32:
                dropped["explanations (explain)"] += 1
            i = skip_field(buf, i, key)
    if summary is None:
        return
    run.wall_times.setdefault(step, wall_time)
    i, stop = summary
    while i < stop:
        key, i = read_key(buf, i)
        length, i = read_varint(buf, i) if key == 0x0A else (0, skip_field(buf, i, key))
        if key == 0x0A:
            _value(run, buf, i, i + length, step, dropped)
            i += length


def _value(run: ImportedRun, buf: bytes, i: int, end: int, step: int, dropped: Counter[str]) -> None:
    tag = ""
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x0A:
            length, i = read_varint(buf, i)
            tag = bytes(buf[i : i + length]).decode("utf-8", "replace")
            i += length
        elif key == 0x1D:  # scalar_value
            run.add(_ours(tag), step, _unpack_f32(buf, i)[0])
            i += 4
        elif key in (0x22, 0x42, 0x4A, 0x52):
            length, i = read_varint(buf, i)
            if key == 0x22:
                image = _field_bytes(buf, i, i + length, 0x22)
                if image:
                    run.images.setdefault(_imported(tag), {})[step] = image
            elif key == 0x42:
                values = _tensor_values(buf, i, i + length)
                if len(values) == 1:
                    run.add(_ours(tag), step, values[0])
                else:
                    dropped[f"tensor {tag!r} ({len(values)} elements, not a scalar)"] += 1
            elif key == 0x4A:
                run.histograms.setdefault(_imported(tag), {})[step] = _histogram(buf, i, i + length)
            else:
                dropped[f"loss landscape {tag!r}"] += 1
            i += length
        else:
            i = skip_field(buf, i, key)


def _ours(tag: str) -> str:
    return TAGS.get(tag) or _imported(tag)


def _imported(tag: str) -> str:
    return tag if m.is_builtin_tag(tag) else m.IMPORT_PREFIX + tag


def _field_bytes(buf: bytes, i: int, end: int, wanted: int) -> bytes:
    while i < end:
        key, i = read_key(buf, i)
        if key == wanted:
            length, i = read_varint(buf, i)
            return bytes(buf[i : i + length])
        i = skip_field(buf, i, key)
    return b""


def _tensor_values(buf: bytes, i: int, end: int) -> list[float]:
    """The numbers of a ``mindspore.irpb.TensorProto`` (SummaryRecord writes them to float_data)."""
    values: list[float] = []
    while i < end:
        key, i = read_key(buf, i)
        field, wire = key >> 3, key & 7
        fmt, single_wire = _TENSOR_FIELDS.get(field, (None, -1))
        if single_wire < 0:
            i = skip_field(buf, i, key)
        elif wire == 2:  # packed
            length, i = read_varint(buf, i)
            if fmt is None:
                stop = i + length
                while i < stop:
                    raw, i = read_varint(buf, i)
                    values.append(float(raw - (1 << 64) if raw >= 1 << 63 and field != 7 else raw))
            else:
                values.extend(v for (v,) in struct.iter_unpack(fmt, buf[i : i + length]))
                i += length
        elif fmt is None:
            raw, i = read_varint(buf, i)
            values.append(float(raw - (1 << 64) if raw >= 1 << 63 and field != 7 else raw))
        else:
            values.append(struct.unpack_from(fmt, buf, i)[0])
            i += struct.calcsize(fmt)
    return values


def _histogram(buf: bytes, i: int, end: int) -> Histogram:
    """MindSpore's buckets (left edge, width, count) as TensorBoard's right-edge limits, with an empty
    first bucket ending at the first left edge (TensorBoard's buckets hold (previous limit, limit]).
    ``sum_squares``, which MindSpore does not record, is taken from the bucket centres."""
    lefts: list[float] = []
    rights: list[float] = []
    counts: list[float] = []
    stats = {"min": 0.0, "max": 0.0, "sum": 0.0}
    names = {5: "max", 6: "min", 7: "sum"}
    while i < end:
        key, i = read_key(buf, i)
        field = key >> 3
        if key == 0x0A:
            length, i = read_varint(buf, i)
            left, width, count = _bucket(buf, i, i + length)
            lefts.append(left)
            rights.append(left + width)
            counts.append(float(count))
            i += length
        elif field in names and key & 7 == 1:
            stats[names[field]] = _unpack_f64(buf, i)[0]
            i += 8
        else:
            i = skip_field(buf, i, key)
    centres = [(a + b) / 2 for a, b in zip(lefts, rights, strict=True)]
    stats["num"] = sum(counts)
    stats["sum_squares"] = sum(c * c * n for c, n in zip(centres, counts, strict=True))
    limits = [lefts[0], *rights] if lefts else []
    return Histogram(stats, limits, [0.0, *counts] if counts else [])


def _bucket(buf: bytes, i: int, end: int) -> tuple[float, float, int]:
    left = width = 0.0
    count = 0
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x09:
            left = _unpack_f64(buf, i)[0]
            i += 8
        elif key == 0x11:
            width = _unpack_f64(buf, i)[0]
            i += 8
        elif key == 0x18:
            count, i = read_varint(buf, i)
        else:
            i = skip_field(buf, i, key)
    return left, width, count


FORMAT = SourceFormat(
    name=NAME,
    description="MindSpore SummaryRecord / SummaryCollector files (*.summary.*)",
    sniff=sniff,
    read=read,
)
