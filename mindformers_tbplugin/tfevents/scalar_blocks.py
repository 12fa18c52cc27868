"""Many steps of the same scalar tags framed as records at once, with numpy (``mftb import`` writes
runs of a million steps, where one :func:`~.events.encode_scalars_event` and one
:func:`~.records.frame_record` per step cost seconds of Python).

Steps whose step varint has the same length give records of one length and one layout: the record
header and its checksum are the same for all of them, and the wall time, step bytes and float32
values sit at fixed columns of a byte matrix, framed by :func:`~.records.frame_payloads`.
The bytes are those of the per-step path (tests compare them); a row the matrix cannot hold as that
path would write it (step 0 or negative, a wall time of +0.0, a value that float32 cannot hold,
which protobuf narrows its own way) takes the per-step path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from mindformers_tbplugin.tfevents.events import _value_head, encode_scalars_event
from mindformers_tbplugin.tfevents.records import frame_payloads, frame_record
from mindformers_tbplugin.tfevents.wire import encode_varint

BLOCK_ROWS = 1 << 15  # rows framed per numpy block: memory stays bounded (~15 MB for 13 tags)


def scalar_records(
    tags: Sequence[str], steps: Sequence[int], wall_times: Sequence[float], columns: Sequence[Sequence[float]]
) -> Iterator[bytes]:
    """The framed records of one ``Event`` per step (``columns``: one value per step for each tag),
    in step order, as blocks of bytes to append to an event file."""
    try:
        step_array = np.array(steps, dtype=np.int64)
        values = np.array(columns, dtype=np.float64).reshape(len(tags), len(steps)).T
    except OverflowError:  # a step beyond int64 or an integer beyond float64: the per-step path says what to do
        yield from _general(tags, steps, wall_times, columns, range(len(steps)))
        return
    walls = np.array(wall_times, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        narrowed = values.astype(np.float32)
    fits = ~(np.isinf(narrowed) & np.isfinite(values)).any(axis=1)
    fast = fits & (step_array > 0) & (walls.view(np.int64) != 0)
    # Each row's kind: its step varint length when it takes the matrix, 0 when it takes the per-step path.
    lengths = np.where(fast, _varint_lengths(step_array), 0)
    bounds = np.flatnonzero((np.diff(lengths) != 0) | (lengths[1:] == 0)) + 1
    heads = [_value_head(tag) for tag in tags]
    for start, stop in zip(np.r_[0, bounds], np.r_[bounds, len(steps)], strict=True):
        if start == stop:
            continue
        if lengths[start] == 0:
            yield from _general(tags, steps, wall_times, columns, range(start, stop))
            continue
        for block in range(start, stop, BLOCK_ROWS):
            end = min(block + BLOCK_ROWS, stop)
            yield _block(heads, step_array[block:end], walls[block:end], narrowed[block:end], int(lengths[start]))


def _general(
    tags: Sequence[str], steps: Sequence[int], walls: Sequence[float], columns: Sequence[Sequence[float]], rows: range
) -> Iterator[bytes]:
    for row in rows:
        values = {tag: column[row] for tag, column in zip(tags, columns, strict=True)}
        yield frame_record(encode_scalars_event(steps[row], walls[row], values))


def _varint_lengths(steps: np.ndarray) -> np.ndarray:
    """Bytes of each (positive) step's varint."""
    lengths = np.ones(len(steps), dtype=np.int64)
    for bits in range(7, 64, 7):
        lengths += steps >= (1 << bits)
    return lengths


def _block(heads: list[bytes], steps: np.ndarray, walls: np.ndarray, values: np.ndarray, step_bytes: int) -> bytes:
    """Records of steps whose varints take ``step_bytes``: a template payload, the varying columns filled in."""
    summary_length = sum(len(head) + 4 for head in heads)
    template = bytearray(b"\x09" + bytes(8) + b"\x10" + bytes(step_bytes) + b"\x2a" + encode_varint(summary_length))
    float_columns = []
    for head in heads:
        template += head
        float_columns.append(len(template))
        template += bytes(4)
    payloads = np.empty((len(steps), len(template)), dtype=np.uint8)
    payloads[:] = np.frombuffer(bytes(template), dtype=np.uint8)
    payloads[:, 1:9] = walls.astype("<f8").view(np.uint8).reshape(-1, 8)
    for i in range(step_bytes):
        byte = (steps >> (7 * i)) & 0x7F
        payloads[:, 10 + i] = byte | 0x80 if i < step_bytes - 1 else byte
    floats = np.ascontiguousarray(values, dtype="<f4").view(np.uint8)
    for k, column in enumerate(float_columns):
        payloads[:, column : column + 4] = floats[:, 4 * k : 4 * k + 4]
    return frame_payloads(payloads)
