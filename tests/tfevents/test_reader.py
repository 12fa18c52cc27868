"""tfevents/reader.py: the watch reader returns what TensorBoard's own reader returns, incrementally;
the doctor's scan tells a clean file, a torn tail, a checksum error and a restart apart."""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import tensorboardX
from conftest import TrainingRun, read_scalars
from fakes import tensor_scalar_summary

from mindformers_tbplugin.imports import tensorboard_folder
from mindformers_tbplugin.tfevents import reader as reader_module
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event, scalars_event
from mindformers_tbplugin.tfevents.reader import Columns, EventFileReader, StepTracker, scan_file
from mindformers_tbplugin.tfevents.records import CHUNK_BYTES, CORRUPT, TORN, frame_record
from mindformers_tbplugin.tfevents.scalar_blocks import scalar_records
from mindformers_tbplugin.tfevents.writer import RunWriter


def read_all(run_dir: Path, tags: set[str] | None = None) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(run_dir.iterdir()):
        for tag, step, value, _ in EventFileReader(path, tags).read():
            series.setdefault(tag, []).append((step, value))
    return series


def test_same_points_as_event_accumulator_on_a_real_training(tiny_run: TrainingRun) -> None:
    expected = read_scalars(tiny_run.run_dir)
    ours = read_all(tiny_run.run_dir)
    assert set(ours) == set(expected)
    for tag, points in expected.items():
        assert ours[tag] == points, tag


def test_tensorboardx_simple_and_tensor_scalars_others_skipped(tmp_path: Path) -> None:
    writer = tensorboardX.SummaryWriter(str(tmp_path))
    for step in range(5):
        writer.add_scalar("x/simple", step * 1.5, step)
        file_writer = writer._get_file_writer()
        file_writer.add_summary(tensor_scalar_summary("x/tensor", step * 2.5, step == 0), step)
        file_writer.add_summary(tensor_scalar_summary("x/double", step * 0.25, step == 0, dtype=2), step)
        writer.add_text("x/text", "not a number", step)
        writer.add_histogram("x/histogram", np.arange(10), step)
    writer.close()
    assert read_all(tmp_path) == {
        "x/simple": [(s, s * 1.5) for s in range(5)],
        "x/tensor": [(s, s * 2.5) for s in range(5)],
        "x/double": [(s, s * 0.25) for s in range(5)],
    }
    assert read_all(tmp_path, tags={"x/tensor"}) == {"x/tensor": [(s, s * 2.5) for s in range(5)]}


def test_only_new_records_are_read_and_a_torn_record_waits(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.host"
    records = [
        frame_record(scalars_event(step, 100.0 + step, {"a": step, "b": -step}).SerializeToString())
        for step in range(4)
    ]
    path.write_bytes(records[0] + records[1] + records[2][:7])
    reader = EventFileReader(path)
    assert [(t, s, v) for t, s, v, _ in reader.read()] == [("a", 0, 0.0), ("b", 0, -0.0), ("a", 1, 1.0), ("b", 1, -1.0)]
    assert reader.offset == len(records[0] + records[1])
    with path.open("ab") as handle:
        handle.write(records[2][7:-2])
    assert list(reader.read()) == []  # still incomplete
    with path.open("ab") as handle:
        handle.write(records[2][-2:] + records[3])
    assert [(t, s, v, w) for t, s, v, w in reader.read()] == [
        ("a", 2, 2.0, 102.0),
        ("b", 2, -2.0, 102.0),
        ("a", 3, 3.0, 103.0),
        ("b", 3, -3.0, 103.0),
    ]
    assert list(reader.read()) == []


def test_corrupt_record_is_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "events.out.tfevents.2.host"
    good = frame_record(scalars_event(1, 1.0, {"a": 1.0}).SerializeToString())
    bad = bytearray(frame_record(scalars_event(2, 2.0, {"a": 2.0}).SerializeToString()))
    bad[-6] ^= 0xFF  # flip a payload byte: its checksum fails
    path.write_bytes(good + bytes(bad) + good)
    assert [(t, s) for t, s, _, _ in EventFileReader(path).read()] == [("a", 1), ("a", 1)]
    assert "fails its checksum" in caplog.text


def test_large_file_is_read_in_chunks_with_nonfinite_values_intact(tmp_path: Path) -> None:
    event_file = EventFile(tmp_path)
    steps = 3 * CHUNK_BYTES // 60  # several chunks
    for step in range(steps):
        event_file.write(
            scalars_event(step, float(step), {"train/loss": math.nan if step == steps - 1 else float(step)})
        )
    event_file.close()
    points = list(EventFileReader(event_file.path, tags={"train/loss"}).read())
    assert len(points) == steps
    assert [p[1] for p in points] == list(range(steps))
    assert math.isnan(points[-1][2]) and points[-2][2] == steps - 2


def test_records_of_equal_length_but_other_tags_or_steps_are_not_confused(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.3.host"
    events = [(1, {"a/x": 1.0}), (2, {"a/y": 2.0}), (3, {"a/x": 3.0}), (200, {"a/x": 4.0}), (-5, {"a/x": 5.0})]
    path.write_bytes(b"".join(frame_record(scalars_event(s, 9.0, v).SerializeToString()) for s, v in events))
    assert [(t, s, v) for t, s, v, _ in EventFileReader(path).read()] == [
        ("a/x", 1, 1.0),
        ("a/y", 2, 2.0),
        ("a/x", 3, 3.0),
        ("a/x", 200, 4.0),
        ("a/x", -5, 5.0),
    ]


# -- the doctor's scan ----------------------------------------------------------------------------


def mftb_file(folder: Path, steps: range, start: int | None = None) -> Path:
    """One event file written by RunWriter: train/loss and a text per step, a restart marker first."""
    writer = RunWriter(folder)
    if start is not None:
        writer.add_session_start(start)
    for step in steps:
        writer.add_scalars(step, {"train/loss": 1.0 / step})
        writer.add_text(step, "meta/note", f"step {step}")
    writer.close()
    (path,) = writer.files
    return path


def record_ends(data: bytes) -> list[int]:
    ends, pos = [], 0
    while pos < len(data):
        pos += 12 + int.from_bytes(data[pos : pos + 8], "little") + 4
        ends.append(pos)
    return ends


def test_scan_of_a_clean_file(tmp_path: Path) -> None:
    path = mftb_file(tmp_path, range(1, 11))
    scan = scan_file(path)
    assert (scan.problem, scan.valid_bytes, scan.size) == (None, path.stat().st_size, path.stat().st_size)
    assert scan.records == 1 + 2 * 10  # file_version, then a scalars and a text record per step
    assert (scan.min_step, scan.max_step, scan.starts) == (1, 10, [])
    assert scan.points == {"train/loss": 10}  # text is no scalar point
    assert scan.writer.endswith(f"pid {os.getpid()}")


def test_scan_of_a_torn_tail(tmp_path: Path) -> None:
    path = mftb_file(tmp_path, range(1, 11))
    data = path.read_bytes()
    ends = record_ends(data)
    path.write_bytes(data[: ends[-1] - 3])  # the writer killed mid-write
    scan = scan_file(path)
    assert (scan.problem, scan.records, scan.valid_bytes) == (TORN, len(ends) - 1, ends[-2])
    assert [p[1] for p in EventFileReader(path).read()] == list(range(1, 11))  # the last record is text


@pytest.mark.parametrize("byte", [9, 12], ids=["header", "payload"])
def test_checksum_error_in_the_middle(tmp_path: Path, byte: int, caplog: pytest.LogCaptureFixture) -> None:
    """The scan stops there, as TensorBoard does; the watch reader skips a bad payload (its header
    still frames the next record) but cannot go past a bad header."""
    path = mftb_file(tmp_path, range(1, 11))
    data = bytearray(path.read_bytes())
    ends = record_ends(bytes(data))
    data[ends[4] + byte] ^= 0xFF  # the sixth record: step 3's scalars
    path.write_bytes(bytes(data))
    scan = scan_file(path)
    assert (scan.problem, scan.records, scan.valid_bytes, scan.max_step) == (CORRUPT, 5, ends[4], 2)
    reader = EventFileReader(path)
    steps = [p[1] for p in reader.read()]
    if byte == 12:
        assert steps == [1, 2, *range(4, 11)] and f"record at byte {ends[4]} fails its checksum" in caplog.text
    else:
        assert steps == [1, 2] and f"corrupt record header at byte {ends[4]}" in caplog.text
        assert list(reader.read()) == []


def test_scan_of_a_restart_marker(tmp_path: Path) -> None:
    first = mftb_file(tmp_path / "run", range(1, 11))
    resumed = mftb_file(tmp_path / "run", range(6, 11), start=6)
    steps = StepTracker()
    scans = [scan_file(path, steps) for path in (first, resumed)]
    assert [scan.starts for scan in scans] == [[], [6]]
    assert (steps.jump_count, steps.jumps) == (0, [])  # SessionLog.START purges the steps written before

    tbx = tensorboardX.SummaryWriter(str(tmp_path / "tbx"), purge_step=6)  # the same marker, from tensorboardX
    tbx.add_scalar("train/loss", 1.0, 6)
    tbx.close()
    (path,) = (tmp_path / "tbx").iterdir()
    assert scan_file(path).starts == [6]

    without_marker = StepTracker()
    for path in (first, mftb_file(tmp_path / "again", range(6, 11))):
        scan_file(path, without_marker)
    assert without_marker.jump_count == 2  # train/loss and meta/note both go from 10 back to 6
    assert (without_marker.jumps[0].from_step, without_marker.jumps[0].to_step) == (10, 6)


# Records of one layout decoded at once with numpy (Columns) give exactly the points of the per-record
# path: the same file read both ways, with varint length boundaries, odd values, a record of other tags,
# a bad checksum inside a run of one layout and a torn tail.
COLUMN_TAGS = ("train/loss", "train/lr", "perf/step_time_ms")
ODD_VALUES = [math.nan, -0.0, math.inf, -math.inf, 1e-45, 1e39, -1e300]


def _write(folder: Path) -> tuple[Path, list[int]]:
    steps = [*range(1, 300), *range(16300, 16500), 2**40, 2**40 + 1]
    columns = [[(s % 89) * 0.25 + k for s in steps] for k in range(len(COLUMN_TAGS))]
    for i, value in enumerate(ODD_VALUES):
        columns[i % len(COLUMN_TAGS)][50 + 7 * i] = value
    events = EventFile(folder)
    half = steps.index(200)
    for block in scalar_records(
        COLUMN_TAGS, steps[:half], [1e9 + s for s in steps[:half]], [c[:half] for c in columns]
    ):
        events.write_framed(block)
    events.write(encode_scalars_event(200, 5.0, {"train/loss": 1.0, "eval/loss": 2.0}))  # other tags
    for block in scalar_records(
        COLUMN_TAGS, steps[half:], [1e9 + s for s in steps[half:]], [c[half:] for c in columns]
    ):
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
