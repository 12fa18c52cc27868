"""A stalled writer thread cannot grow memory: the queue keeps the newest items and says so once."""

from __future__ import annotations

import threading
from pathlib import Path

from conftest import plugin_log, read_scalars

from mindformers_tbplugin.tfevents.events import session_start_event
from mindformers_tbplugin.tfevents.writer import RunWriter


def stall(writer: RunWriter) -> threading.Event:
    """Block the writer thread for real inside a write (as on a disk that stops answering) until the
    returned event is set."""
    release, blocked = threading.Event(), threading.Event()

    def stalled_write(step: int, wall_time: float):
        blocked.set()
        release.wait(60)
        return session_start_event(step, wall_time)

    writer.add_built(0, stalled_write)
    writer.flush(timeout=0)  # wakes the thread, which picks the builder up
    assert blocked.wait(10)
    return release


def test_stalled_disk_drops_the_oldest_points_with_one_warning(tmp_path: Path) -> None:
    max_queue, steps = 100, 1000
    writer = RunWriter(tmp_path / "run", max_queue=max_queue)
    release = stall(writer)
    with plugin_log() as messages:
        for step in range(1, steps + 1):
            writer.add_scalars(step, {"train/loss": float(step)})
            assert len(writer._pending) <= max_queue
        release.set()
        writer.close()
    warnings = [m for m in messages if "fell behind" in m]
    assert len(warnings) == 1, messages
    assert f"queue size {max_queue}" in warnings[0]
    kept = [step for step, _ in read_scalars(tmp_path / "run")["train/loss"]]
    # The newest steps survive, contiguous up to the last; the flush request queued by stall() may
    # hold one of the max_queue places.
    assert kept == list(range(kept[0], steps + 1))
    assert max_queue - 1 <= len(kept) <= max_queue


def test_no_warning_when_the_queue_keeps_up(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", max_queue=100)
    release = stall(writer)
    with plugin_log() as messages:
        for step in range(1, 51):
            writer.add_scalars(step, {"train/loss": float(step)})
        release.set()
        writer.close()
    assert not [m for m in messages if "fell behind" in m]
    assert len(read_scalars(tmp_path / "run")["train/loss"]) == 50
