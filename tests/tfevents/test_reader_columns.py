"""Records of one layout decoded at once with numpy (Columns) give exactly the points the per-record
path gives: the same file read both ways, with varint length boundaries, odd values, a record of
other tags, a bad checksum inside a run of one layout and a torn tail."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from mindformers_tbplugin.imports import tensorboard_folder
from mindformers_tbplugin.tfevents import reader as reader_module
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event
from mindformers_tbplugin.tfevents.reader import Columns, EventFileReader
from mindformers_tbplugin.tfevents.scalar_blocks import scalar_records

TAGS = ("train/loss", "train/lr", "perf/step_time_ms")
ODD = [math.nan, -0.0, math.inf, -math.inf, 1e-45, 1e39, -1e300]


def _write(folder: Path) -> tuple[Path, list[int]]:
    steps = [*range(1, 300), *range(16300, 16500), 2**40, 2**40 + 1]
    columns = [[(s % 89) * 0.25 + k for s in steps] for k in range(len(TAGS))]
    for i, value in enumerate(ODD):
        columns[i % len(TAGS)][50 + 7 * i] = value
    events = EventFile(folder)
    half = steps.index(200)
    for block in scalar_records(TAGS, steps[:half], [1e9 + s for s in steps[:half]], [c[:half] for c in columns]):
        events.write_framed(block)
    events.write(encode_scalars_event(200, 5.0, {"train/loss": 1.0, "eval/loss": 2.0}))  # other tags
    for block in scalar_records(TAGS, steps[half:], [1e9 + s for s in steps[half:]], [c[half:] for c in columns]):
        events.write_framed(block)
    events.close()
    data = bytearray(events.path.read_bytes())
    # A payload byte flipped in a record of the first run: its checksum fails, it is skipped.
    offsets = _record_offsets(bytes(data))
    data[offsets[100] + 12 + 3] ^= 0xFF
    data += data[offsets[-1] : offsets[-1] + 30]  # a torn tail: the start of a record
    events.path.write_bytes(bytes(data))
    return events.path, steps


def _record_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos + 12 <= len(data):
        offsets.append(pos)
        pos += 12 + struct.unpack_from("<Q", data, pos)[0] + 4
    return offsets


def test_columns_give_the_points_of_the_per_record_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, steps = _write(tmp_path)
    fast_reader = EventFileReader(path)
    blocks = list(fast_reader.blocks())
    assert sum(isinstance(block, Columns) for block in blocks) >= 2  # the fast path was taken
    fast = list(EventFileReader(path).read())
    monkeypatch.setattr(reader_module, "MIN_COLUMNS", 10**9)
    slow_reader = EventFileReader(path)
    slow = list(slow_reader.read())
    assert [p[:2] for p in fast] == [p[:2] for p in slow]
    for a, b in zip(fast, slow, strict=True):  # NaN != NaN: compare the float32 bytes
        assert struct.pack("<fd", a[2], a[3]) == struct.pack("<fd", b[2], b[3])
    assert fast_reader.bad_records == slow_reader.bad_records and len(slow_reader.bad_records) == 1
    assert fast_reader.problem == slow_reader.problem == "torn"
    assert {p[1] for p in slow if p[0] == "train/lr"} == set(steps) - {steps[99]}  # the bad record's step
    assert [p for p in slow if p[0] == "eval/loss"] == [("eval/loss", 200, 2.0, 5.0)]


def test_a_folder_reads_the_same_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = _write(tmp_path)
    fast = tensorboard_folder.read([path])
    monkeypatch.setattr(reader_module, "MIN_COLUMNS", 10**9)
    slow = tensorboard_folder.read([path])
    assert repr(fast.scalars) == repr(slow.scalars)  # repr: NaN compares equal by its text
    assert fast.wall_times == slow.wall_times
    assert fast.stopped_at == slow.stopped_at and fast.skipped == slow.skipped
