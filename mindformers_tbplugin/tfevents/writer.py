"""The writer of one run folder: what the training thread talks to.

``add_scalars`` appends plain floats to a bounded deque and returns; a daemon thread encodes them,
writes and flushes, so the training thread never waits on disk and never builds a protobuf (as in
tensorboardX, whose writer thread also owns the file).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2

from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event, histogram_event, session_start_event, text_event

_SCALARS, _TEXT, _START, _FLUSH, _CLOSE, _HISTOGRAM, _BUILT = range(7)


class RunWriter:
    """Background-thread writer for one run folder.

    ``add_scalars``/``add_text`` are safe to call from any thread and return at once. When the queue
    holds ``max_queue`` items (a stalled disk), the oldest are dropped and a warning says so once.
    Disk errors never reach the caller: the writer warns once, drops that batch, and opens a fresh
    event file when writing works again. ``on_close(writer)`` runs once it is closed (the registry
    forgets it then).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        flush_secs: float = 5.0,
        max_queue: int = 100_000,
        poll_secs: float = 1.0,
        on_close: Callable[[RunWriter], None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.flush_secs = float(flush_secs)
        self._poll_secs = min(poll_secs, self.flush_secs)
        self._pending: deque[tuple] = deque(maxlen=max_queue)
        self._max_queue = max_queue
        self._dropped = 0
        self._wake = threading.Event()
        self._closed = False
        self._file: EventFile | None = None
        self._failing_since: str | None = None
        self._warn_once = WarnOnce()
        self._on_close = on_close
        self.files: list[Path] = []
        # Run on this thread before each drain and before a flush is honoured; True when it queued
        # records (the session's step backlog, session/step_backlog.py).
        self.before_drain: Callable[[], bool] | None = None
        # Also on this thread: each scalar step once written, and after each drain (True: the last one,
        # at close, once the file is closed). The run's status record (session/status_writer.py).
        self.on_scalars: Callable[[int, Mapping[str, float]], None] | None = None
        self.after_drain: Callable[[bool], None] | None = None
        self._thread = threading.Thread(target=self._run, name=f"mftb-writer:{self.run_dir.name}", daemon=True)
        self._thread.start()

    # -- producer side (any thread) -------------------------------------------------------------
    def add_scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        """Queue one step's scalars. ``values`` must not be mutated afterwards."""
        if len(self._pending) == self._max_queue:
            self._dropped += 1
        self._pending.append((_SCALARS, step, wall_time or time.time(), values))

    def add_scalars_from(self, step: int, compute: Callable[[], Mapping[str, float]]) -> None:
        """Queue one step's scalars that ``compute()`` works out on the writer thread (nothing is
        written when it returns none): for values whose computation the training thread cannot afford."""

        def build(step: int, wall_time: float) -> bytes | None:
            values = compute()
            return encode_scalars_event(step, wall_time, values) if values else None

        self.add_built(step, build)

    def add_text(self, step: int, tag: str, text: str, wall_time: float | None = None) -> None:
        self._pending.append((_TEXT, step, wall_time or time.time(), tag, text))

    def add_session_start(self, step: int) -> None:
        self._pending.append((_START, step, time.time()))

    def add_histogram(
        self, step: int, tag: str, stats: Mapping[str, float], limits: Sequence[float], counts: Sequence[float]
    ) -> None:
        """Queue one histogram as plain numbers: ``stats`` holds min, max, num, sum and sum_squares;
        ``counts[i]`` is the number of values in (limits[i-1], limits[i]]."""
        self._pending.append((_HISTOGRAM, step, time.time(), tag, stats, limits, counts))

    def add_built(self, step: int, build: Callable[[int, float], event_pb2.Event | bytes | None]) -> None:
        """Queue a structured record (hparams, a graph, a plugin's tensor record): ``build(step,
        wall_time)`` makes the Event or its bytes (None: nothing to write) on the writer thread, so the
        caller neither encodes nor waits."""
        self._pending.append((_BUILT, step, time.time(), build))

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything queued before this call is written and flushed to the OS."""
        if self._closed or not self._thread.is_alive():
            return False
        done = threading.Event()
        self._pending.append((_FLUSH, done))
        self._wake.set()
        return done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write everything queued, flush, close the file and stop the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        done = threading.Event()
        self._pending.append((_CLOSE, done))
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            done.wait(timeout)
            self._thread.join(timeout=1.0)
        if self._on_close is not None:
            self._on_close(self)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        # Wakes every poll_secs, and just in time for each flush, so that a flush always carries
        # everything queued before it. Each wake costs ~0.3 ms of CPU in a training process (its
        # code and data are cold by then), hence a second rather than a fraction of one.
        next_flush = time.monotonic() + self.flush_secs
        while True:
            self._wake.wait(min(self._poll_secs, max(next_flush - time.monotonic(), 0.0)))
            self._wake.clear()
            finished = self._drain()
            if finished:
                return
            self._after_drain(False)
            if time.monotonic() >= next_flush:
                self._flush_file()
                next_flush = time.monotonic() + self.flush_secs

    def _drain(self) -> bool:
        """Write all queued items. Returns True once a close request has been handled."""
        pending = self._pending
        # A flush or close waits until the records the hook queued (behind it) are written: until this
        # many items have left the queue.
        routed_until = len(pending) if self._before_drain() else 0
        while pending:
            item = pending.popleft()
            routed_until -= 1
            kind = item[0]
            if kind in (_FLUSH, _CLOSE):
                if self._before_drain():
                    routed_until = len(pending)
                if routed_until > 0:
                    pending.append(item)
                    continue
            if kind == _SCALARS:
                self._write(encode_scalars_event, item[1], item[2], item[3])
                if self.on_scalars is not None:
                    self._hook("on_scalars", self.on_scalars, item[1], item[3])
            elif kind == _TEXT:
                self._write(text_event, item[1], item[2], item[3], item[4])
            elif kind == _START:
                self._write(session_start_event, item[1], item[2])
            elif kind == _HISTOGRAM:
                self._write(histogram_event, *item[1:])
            elif kind == _BUILT:
                event = self._build_guarded(item[3], item[1], item[2])
                if event is not None:
                    self._write(lambda built=event: built)
            elif kind == _FLUSH:
                self._flush_file()
                self._after_drain(False)  # a flush carries what the hook writes too
                item[1].set()
            elif kind == _CLOSE:
                self._report_dropped()  # also when the stall ends only at close
                self._flush_file()
                self._close_file()
                self._after_drain(True)
                item[1].set()
                return True
        self._report_dropped()
        return False

    def _before_drain(self) -> bool:
        hook = self.before_drain
        if hook is None:
            return False
        try:
            return hook()
        except Exception as exc:  # the writer thread must outlive it
            self._warn_once("before_drain", f"TensorBoard writer for {self.run_dir}: {exc!r} before writing")
            return False

    def _after_drain(self, closing: bool) -> None:
        if self.after_drain is not None:
            self._hook("after_drain", self.after_drain, closing)

    def _hook(self, name: str, hook: Callable[..., None], *args: Any) -> None:
        try:
            hook(*args)
        except Exception as exc:  # the writer thread must outlive it
            self._warn_once(name, f"TensorBoard writer for {self.run_dir}: {exc!r} in {name}")

    def _report_dropped(self) -> None:
        if self._dropped:
            self._warn_once(
                "dropped",
                f"TensorBoard writer for {self.run_dir} fell behind (disk stalled?): dropped the oldest "
                f"{self._dropped} queued items to bound memory (queue size {self._max_queue}).",
            )

    def _write(self, build: Callable[..., event_pb2.Event | bytes], *args: Any) -> None:
        try:
            if self._file is None:
                self._file = EventFile(self.run_dir)
                self.files.append(self._file.path)
            self._file.write(build(*args))
        except OSError as exc:
            self._on_disk_error(exc)
            return
        if self._failing_since is not None:
            self._failing_since = None
            # said once: a disk that fills again must not flood the log
            self._warn_once(
                "recovered", f"TensorBoard writer for {self.run_dir}: writing works again, monitoring resumed."
            )

    def _build_guarded(
        self, build: Callable[[int, float], event_pb2.Event | bytes], step: int, wall_time: float
    ) -> event_pb2.Event | bytes | None:
        """Run a queued builder; one that raises costs only its own record, never the writer thread."""
        try:
            return build(step, wall_time)
        except Exception as exc:
            self._warn_once(f"build:{getattr(build, '__qualname__', build)}", f"TensorBoard record skipped: {exc!r}")
            return None

    def _flush_file(self) -> None:
        if self._file is None:
            return
        try:
            self._file.flush()
        except OSError as exc:
            self._on_disk_error(exc)
            return
        if not self._file.path.exists():
            # The folder or file was deleted under us: writes would go to an unlinked inode.
            self._warn_once(
                "deleted",
                f"TensorBoard event file {self._file.path} was deleted during training; recent points "
                "are lost, later ones go to a new file in a re-created run folder.",
            )
            self._close_file()

    def _close_file(self) -> None:
        if self._file is None:
            return
        try:
            self._file.close()
        except OSError as exc:
            self._on_disk_error(exc)
        self._file = None

    def _on_disk_error(self, exc: OSError) -> None:
        """Drop the torn file (a later write opens a fresh one) and say so once per failure spell."""
        broken, self._file = self._file, None
        if broken is not None:
            with contextlib.suppress(OSError):
                broken.close()
        if self._failing_since is None:
            self._failing_since = str(exc)
            self._warn_once(
                f"disk:{exc.errno}",
                f"TensorBoard writer for {self.run_dir} cannot write ({exc}); training goes on, "
                "points are dropped until writing works again.",
            )
