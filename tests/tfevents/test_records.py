"""tfevents/records.py: framing written byte for byte as tensorboardX writes it, read back as TensorBoard
reads it, and read incrementally with a torn tail told apart from a checksum error."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
from tensorboardX.record_writer import RecordWriter

from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event, session_start_event
from mindformers_tbplugin.tfevents.records import (
    CHUNK_BYTES,
    CORRUPT,
    HEADER_BYTES,
    TORN,
    RecordReader,
    frame_record,
    split_records,
    tail_payloads,
)

PAYLOADS = [b"", b"x", bytes(range(256)) * 5, random.Random(0).randbytes(70_000)]


def written_file(folder: Path, steps: int = 5) -> tuple[Path, list[bytes]]:
    """An event file written by the product's EventFile, and the payloads it holds (file_version first)."""
    event_file = EventFile(folder)
    for step in range(1, steps + 1):
        event_file.write(encode_scalars_event(step, 1000.0 + step, {"train/loss": 1.0 / step}))
    event_file.write(session_start_event(3, 1010.0))
    event_file.close()
    return event_file.path, tensorboard_records(event_file.path)


def tensorboard_records(path: Path) -> list[bytes]:
    reader = PyRecordReader_New(str(path))
    found = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return found
        found.append(reader.record())


def record_ends(data: bytes) -> list[int]:
    """Where each record ends, from the length fields alone."""
    ends, pos = [], 0
    while pos < len(data):
        pos += HEADER_BYTES + int.from_bytes(data[pos : pos + 8], "little") + 4
        ends.append(pos)
    return ends


def test_framing_is_tensorboardx_byte_for_byte(tmp_path: Path) -> None:
    reference = RecordWriter(str(tmp_path / "tbx"))
    for payload in PAYLOADS:
        reference.write(payload)
    reference.close()
    assert b"".join(frame_record(p) for p in PAYLOADS) == (tmp_path / "tbx").read_bytes()


def test_round_trip_through_tensorboard_reader(tmp_path: Path) -> None:
    path = tmp_path / "records"
    path.write_bytes(b"".join(frame_record(p) for p in PAYLOADS))
    assert tensorboard_records(path) == PAYLOADS
    buf = path.read_bytes()
    spans, used, problem = split_records(buf)
    assert [buf[start:stop] for start, stop, _ in spans] == PAYLOADS
    assert all(ok for _, _, ok in spans) and (used, problem) == (len(buf), None)


def test_every_cut_of_a_written_file_is_a_torn_tail(tmp_path: Path) -> None:
    path, expected = written_file(tmp_path)
    data = path.read_bytes()
    ends = record_ends(data)
    for cut in range(len(data)):
        complete = [end for end in ends if end <= cut]
        spans, used, problem = split_records(data[:cut])
        assert used == (complete[-1] if complete else 0), cut
        assert problem == (None if cut in (0, *ends) else TORN), cut
        assert [data[s:e] for s, e, _ in spans] == expected[: len(complete)]


def test_checksum_errors_in_the_middle(tmp_path: Path) -> None:
    path, expected = written_file(tmp_path)
    data = path.read_bytes()
    ends = record_ends(data)
    third = ends[1]  # the third record starts here

    bad_payload = bytearray(data)
    bad_payload[third + HEADER_BYTES] ^= 0xFF
    spans, used, problem = split_records(bytes(bad_payload))
    assert [ok for _, _, ok in spans] == [True, True, False] + [True] * (len(ends) - 3)  # framing goes on
    assert (used, problem) == (len(data), None)

    bad_header = bytearray(data)
    bad_header[third + 9] ^= 0xFF  # the length's checksum: nothing after it can be framed
    spans, used, problem = split_records(bytes(bad_header))
    assert ([bytes(bad_header[s:e]) for s, e, _ in spans], used, problem) == (expected[:2], third, CORRUPT)


def test_reader_follows_appends_and_waits_at_a_torn_tail(tmp_path: Path) -> None:
    path, expected = written_file(tmp_path)
    data = path.read_bytes()
    ends = record_ends(data)
    path.write_bytes(data[: ends[2] + 5])
    reader = RecordReader(path)

    def read() -> list[bytes]:
        return [buf[s:e] for _, buf, spans in reader.chunks() for s, e, _ in spans]

    assert (read(), reader.offset, reader.problem) == (expected[:3], ends[2], TORN)
    with path.open("ab") as handle:
        handle.write(data[ends[2] + 5 :])
    assert (read(), reader.offset, reader.problem) == (expected[3:], len(data), None)
    assert read() == []
    path.write_bytes(data[: ends[0]])  # replaced by a shorter file: read from the start
    assert (read(), reader.offset) == (expected[:1], ends[0])


def test_reader_reads_a_record_larger_than_a_chunk(tmp_path: Path) -> None:
    big = random.Random(1).randbytes(CHUNK_BYTES * 2 + 7)
    path = tmp_path / "records"
    path.write_bytes(frame_record(b"a") + frame_record(big) + frame_record(b"b"))
    reader = RecordReader(path)
    assert [buf[s:e] for _, buf, spans in reader.chunks() for s, e, _ in spans] == [b"a", big, b"b"]
    assert (reader.offset, reader.problem) == (path.stat().st_size, None)


@pytest.mark.parametrize("cut", [3, HEADER_BYTES + 100])
def test_reader_says_torn_when_a_large_record_is_cut(tmp_path: Path, cut: int) -> None:
    record = frame_record(bytes(CHUNK_BYTES + 100))
    path = tmp_path / "records"
    path.write_bytes(frame_record(b"a") + record[:cut])
    reader = RecordReader(path)
    assert [buf[s:e] for _, buf, spans in reader.chunks() for s, e, _ in spans] == [b"a"]
    assert (reader.offset, reader.problem) == (len(frame_record(b"a")), TORN)


def test_reader_stops_for_good_at_a_corrupt_header(tmp_path: Path) -> None:
    path, expected = written_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[record_ends(bytes(data))[0] + 2] ^= 0xFF  # the second record's length
    path.write_bytes(bytes(data))
    reader = RecordReader(path)
    assert [buf[s:e] for _, buf, spans in reader.chunks() for s, e, _ in spans] == expected[:1]
    assert reader.problem == CORRUPT
    assert list(reader.chunks()) == []


def test_the_tail_of_a_file_is_framed_from_wherever_the_window_starts(tmp_path: Path) -> None:
    """tail_payloads finds the first record start in the last bytes (records of every size, payload bytes
    that look like headers) and returns the complete records from there, not a torn last one."""
    payloads = [encode_scalars_event(step, 1.0, {"x" * (step % 97): float(step)}) for step in range(1, 3000)]
    payloads.append(b"\x09" + bytes(8) + b"\x00" * 40)  # zeros: candidates for a false start
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(map(frame_record, payloads)) + frame_record(b"\x09torn")[:-3])
    for window in (100, 1000, 4096, 65536):
        tail = tail_payloads(path, window)
        assert tail and tail == payloads[-len(tail) :], window
        assert sum(len(p) + 16 for p in tail) > window - 16 - 200 - 7  # the whole window but its first record
    assert tail_payloads(path, 1 << 30) == payloads  # a window past the start: every record
