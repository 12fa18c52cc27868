"""RunWriter: real event files, read back with TensorBoard's own reader; a stalled writer thread cannot
grow memory (the queue keeps the newest items and says so once)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
from conftest import plugin_log, read_scalars
from tb_helpers import wait_for
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from mindformers_tbplugin.tfevents.events import session_start_event
from mindformers_tbplugin.tfevents.writer import RunWriter


def _events(run_dir: Path) -> list:
    (path,) = run_dir.glob("*tfevents*")
    return list(EventFileLoader(str(path)).Load())


def test_scalars_and_text_round_trip(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    writer.add_session_start(1)
    for step in range(1, 6):
        writer.add_scalars(step, {"train/loss": 2.0 / step, "train/lr": 1e-3})
    writer.add_text(5, "meta/note", "hello ✓")
    writer.close()
    scalars = read_scalars(tmp_path / "run")
    assert scalars["train/loss"] == [(s, pytest.approx(2.0 / s)) for s in range(1, 6)]
    accumulator = EventAccumulator(str(tmp_path / "run"), size_guidance={TENSORS: 0})
    accumulator.Reload()
    (text,) = accumulator.Tensors("meta/note")
    assert text.tensor_proto.string_val[0].decode() == "hello ✓"
    events = _events(tmp_path / "run")
    assert events[0].file_version == "brain.Event:2"
    assert events[1].session_log.status == events[1].session_log.START


def test_nan_and_inf_are_written_faithfully(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    writer.add_scalars(1, {"a": math.nan, "b": math.inf, "c": -math.inf})
    writer.close()
    values = {tag: series[0][1] for tag, series in read_scalars(tmp_path / "run").items()}
    assert math.isnan(values["a"]) and values["b"] == math.inf and values["c"] == -math.inf


def test_flushes_within_flush_secs_without_closing(tmp_path: Path) -> None:
    slow, fast = RunWriter(tmp_path / "slow", flush_secs=3600), RunWriter(tmp_path / "fast", flush_secs=0.5)
    for writer in (slow, fast):
        writer.add_scalars(1, {"train/loss": 1.0})
    try:
        fast_dir = tmp_path / "fast"  # created with its file at the first flush
        assert wait_for(lambda: fast_dir.is_dir() and read_scalars(fast_dir).get("train/loss") == [(1, 1.0)])
        slow_dir = tmp_path / "slow"  # still in the OS-less buffer
        assert not slow_dir.is_dir() or "train/loss" not in read_scalars(slow_dir)
    finally:
        slow.close()
        fast.close()
    assert read_scalars(tmp_path / "slow")["train/loss"] == [(1, 1.0)]


def test_explicit_flush_puts_everything_queued_on_disk(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", flush_secs=3600)
    for step in range(1, 101):
        writer.add_scalars(step, {"x": float(step)})
    assert writer.flush(timeout=10)
    assert len(read_scalars(tmp_path / "run")["x"]) == 100
    writer.close()


def test_non_ascii_run_folder_is_written_and_read(tmp_path: Path) -> None:
    run_dir = tmp_path / "实验 ü" / "run"
    writer = RunWriter(run_dir)
    writer.add_scalars(3, {"train/loss": 0.5})
    writer.close()
    assert read_scalars(run_dir)["train/loss"] == [(3, 0.5)]


def test_a_failing_disk_never_raises_to_the_caller(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the run folder should be")
    writer = RunWriter(blocker / "run", flush_secs=0.2)
    with plugin_log() as messages:
        for step in range(50):
            writer.add_scalars(step, {"x": 1.0})
        writer.flush(timeout=5)
        writer.close()
    assert len([m for m in messages if "cannot write" in m]) == 1


def test_a_failing_record_builder_costs_only_its_record(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def broken(step: int, wall_time: float) -> None:
        raise ValueError("bad record")

    writer = RunWriter(tmp_path / "run")
    with plugin_log() as messages:
        writer.add_built(1, broken)
        writer.add_scalars(2, {"train/loss": 1.5})
        writer.close()
    assert any("bad record" in m for m in messages)
    accumulator = EventAccumulator(str(tmp_path / "run"))
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("train/loss")] == [(2, 1.5)]


def test_a_flush_waits_for_what_the_before_drain_hook_queues(tmp_path: Path) -> None:
    # The session's step backlog is routed by this hook on the writer thread: a flush must carry the
    # steps queued before it, though their records only exist once the hook has run.
    writer = RunWriter(tmp_path / "run", flush_secs=60.0)
    backlog = [(step, {"train/loss": float(step)}) for step in (1, 2, 3)]
    on_thread: list[str] = []

    def route() -> bool:
        on_thread.append(threading.current_thread().name)
        routed = bool(backlog)
        while backlog:
            writer.add_scalars(*backlog.pop(0))
        return routed

    writer.before_drain = route
    flushes = [threading.Thread(target=writer.flush) for _ in range(3)]  # several waiting at once
    for flush in flushes:
        flush.start()
    for flush in flushes:
        flush.join(10)
    assert read_scalars(tmp_path / "run")["train/loss"] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    backlog.append((5, {"train/loss": 5.0}))
    assert writer.flush()
    assert read_scalars(tmp_path / "run")["train/loss"][-1] == (5, 5.0)
    assert set(on_thread) == {"mftb-writer:run"}
    writer.before_drain = lambda: 1 / 0  # a hook that fails is said once; the writer carries on
    with plugin_log() as messages:
        writer.add_scalars(6, {"train/loss": 6.0})
        writer.close()
    assert any("ZeroDivisionError" in message for message in messages)
    assert read_scalars(tmp_path / "run")["train/loss"][-1] == (6, 6.0)


# -- a stalled writer thread -----------------------------------------------------------------------
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
