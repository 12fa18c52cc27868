"""Scalar records framed in numpy blocks are byte for byte the per-step records (encode_scalars_event,
itself checked against protobuf, framed by frame_record), whatever the step or the value."""

from __future__ import annotations

import math

import pytest
from tensorboard.backend.event_processing import event_accumulator

from mindformers_tbplugin.tfevents import scalar_blocks
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event
from mindformers_tbplugin.tfevents.records import frame_record
from mindformers_tbplugin.tfevents.scalar_blocks import scalar_records

TAGS = ("train/loss", "train/lr", "非ASCII/tag", "")
# Varint length boundaries, a large step, and steps the matrix leaves to the per-step path (0, negative).
STEPS = [1, 2, 126, 127, 128, 129, 16383, 16384, 16385, 2**21 - 1, 2**21, 2**35, 2**62]
ODD_VALUES = [math.nan, -math.nan, -0.0, math.inf, -math.inf, 1e-45, 3.4e38, 1e39, -1e300, 3.4028235677973366e38]


def _per_step(tags, steps, walls, columns) -> bytes:
    rows = zip(*columns, strict=True) if columns else [()] * len(steps)
    return b"".join(
        frame_record(encode_scalars_event(step, wall, dict(zip(tags, row, strict=True))))
        for step, wall, row in zip(steps, walls, rows, strict=True)
    )


def _columns(steps: list[int], tags=TAGS) -> list[list[float]]:
    return [[(step % 97) * 0.37 + k - 1.5 for step in steps] for k in range(len(tags))]


@pytest.mark.parametrize("block_rows", [3, 1 << 15])
def test_blocks_are_the_per_step_bytes(monkeypatch: pytest.MonkeyPatch, block_rows: int) -> None:
    monkeypatch.setattr(scalar_blocks, "BLOCK_ROWS", block_rows)
    steps = STEPS
    walls = [1_700_000_000.0 + 0.25 * i for i in range(len(steps))]
    columns = _columns(steps)
    assert b"".join(scalar_records(TAGS, steps, walls, columns)) == _per_step(TAGS, steps, walls, columns)


def test_odd_values_steps_and_wall_times_take_the_per_step_bytes() -> None:
    steps = [-5, 0, *range(1, len(ODD_VALUES) + 1), 300]
    walls = [1.5, 0.0, -0.0, *[1e9 + i for i in range(len(ODD_VALUES) - 1)], 0.0]
    columns = _columns(steps)
    for k in range(len(TAGS)):  # each odd value at a different row in each column
        for i, value in enumerate(ODD_VALUES):
            columns[k][2 + (i + k) % len(ODD_VALUES)] = value
    assert b"".join(scalar_records(TAGS, steps, walls, columns)) == _per_step(TAGS, steps, walls, columns)


def test_a_step_beyond_int64_takes_the_per_step_bytes() -> None:
    steps = [5, 2**64 + 3]
    columns = _columns(steps)
    assert b"".join(scalar_records(TAGS, steps, [1.0, 2.0], columns)) == _per_step(TAGS, steps, [1.0, 2.0], columns)


def test_no_tags_and_no_steps() -> None:
    assert b"".join(scalar_records((), [1, 200], [1.0, 2.0], [])) == _per_step((), [1, 200], [1.0, 2.0], [])
    assert list(scalar_records(TAGS, [], [], [[] for _ in TAGS])) == []


def test_tensorboard_reads_the_blocks(tmp_path) -> None:
    steps = list(range(1, 20001, 7))
    walls = [1e9 + step for step in steps]
    columns = _columns(steps, TAGS[:2])
    events = EventFile(tmp_path)
    for block in scalar_records(TAGS[:2], steps, walls, columns):
        events.write_framed(block)
    events.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    for tag, column in zip(TAGS[:2], columns, strict=True):
        read = acc.Scalars(tag)
        assert [e.step for e in read] == steps
        assert [e.wall_time for e in read] == walls
        assert [e.value for e in read] == pytest.approx(column, rel=1e-6)
