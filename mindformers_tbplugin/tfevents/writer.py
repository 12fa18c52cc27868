"""TensorBoard event files: the only module that knows the file format.

Two layers, as in tensorboardX:

* :class:`EventFile` writes framed, checksummed ``Event`` records to one ``*tfevents*`` file. It is
  used by one thread only (the writer thread).
* :class:`RunWriter` is what the training thread talks to. ``add_scalars`` appends plain floats to a
  bounded deque and returns; a daemon thread encodes them into protobufs, writes and flushes. The
  training thread never waits on disk and never builds a protobuf.

Writers are kept in a per-process registry keyed by run folder, so every producer in a process
shares one writer per folder (two writers in one folder make TensorBoard mix their points). All open
writers are closed at interpreter exit and on SIGTERM.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from mindformers_tbplugin.log import WarnOnce, logger
from mindformers_tbplugin.tfevents.scalar_encoding import encode_scalars_event

try:  # C implementation; the pure-Python fallback holds the GIL ~100x longer per record.
    import google_crc32c as _crc

    def _crc32c(data: bytes) -> int:
        return _crc.value(data)
except ImportError:  # pragma: no cover - exercised only without the optional wheel
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as _crc32c_py

    def _crc32c(data: bytes) -> int:
        return _crc32c_py(data)


_MASK_DELTA = 0xA282EAD8
_FILE_VERSION = "brain.Event:2"
_file_counter = itertools.count()


def _masked_crc(data: bytes) -> bytes:
    crc = _crc32c(data)
    masked = (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
    return struct.pack("<I", masked)


def frame_record(payload: bytes) -> bytes:
    """TFRecord framing: length, its masked CRC32C, payload, the payload's masked CRC32C."""
    header = struct.pack("<Q", len(payload))
    return header + _masked_crc(header) + payload + _masked_crc(payload)


# ---------------------------------------------------------------------------------------------
# Event construction (called on the writer thread only)
# ---------------------------------------------------------------------------------------------


def scalars_event(step: int, wall_time: float, values: dict[str, float]) -> event_pb2.Event:
    summary = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]
    )
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary)


def text_event(step: int, wall_time: float, tag: str, text: str) -> event_pb2.Event:
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        string_val=[text.encode("utf-8")],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]),
    )
    metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    value = summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=[value]))


def session_start_event(step: int, wall_time: float) -> event_pb2.Event:
    """``SessionLog.START``: TensorBoard drops points at or after ``step`` written before it."""
    return event_pb2.Event(
        wall_time=wall_time, step=step, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)
    )


def histogram_event(
    step: int, wall_time: float, tag: str, stats: Mapping[str, float], limits: Sequence[float], counts: Sequence[float]
) -> event_pb2.Event:
    """A ``HistogramProto`` value: TensorBoard's histograms and distributions dashboards read it."""
    histo = summary_pb2.HistogramProto(
        min=stats["min"],
        max=stats["max"],
        num=stats["num"],
        sum=stats["sum"],
        sum_squares=stats["sum_squares"],
        bucket_limit=limits,
        bucket=counts,
    )
    value = summary_pb2.Summary.Value(tag=tag, histo=histo)
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=[value]))


class EventFile:
    """One append-only ``events.out.tfevents.*`` file. Not thread-safe: the writer thread owns it."""

    def __init__(self, run_dir: Path, filename_suffix: str = "") -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        stamp, host, pid, serial = int(time.time()), socket.gethostname(), os.getpid(), next(_file_counter)
        name = f"events.out.tfevents.{stamp:010d}.{host}.{pid}.{serial}{filename_suffix}"
        self.path = run_dir / name
        self._file = open(self.path, "ab")  # noqa: SIM115 - lives as long as the writer
        self.write(event_pb2.Event(wall_time=time.time(), file_version=_FILE_VERSION))

    def write(self, event: event_pb2.Event | bytes) -> None:
        """Append one record: an ``Event`` or its serialised bytes."""
        payload = event if isinstance(event, bytes) else event.SerializeToString()
        self._file.write(frame_record(payload))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# ---------------------------------------------------------------------------------------------
# Asynchronous run writer
# ---------------------------------------------------------------------------------------------

_SCALARS, _TEXT, _START, _FLUSH, _CLOSE, _HISTOGRAM, _BUILT = range(7)


class RunWriter:
    """Background-thread writer for one run folder.

    ``add_scalars``/``add_text`` are safe to call from any thread and return at once. When the queue
    holds ``max_queue`` items (a stalled disk), the oldest are dropped and a warning says so once.
    Disk errors never reach the caller: the writer warns once, drops that batch, and opens a fresh
    event file when writing works again.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        flush_secs: float = 5.0,
        max_queue: int = 100_000,
        poll_secs: float = 1.0,
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
        self.files: list[Path] = []
        self._thread = threading.Thread(target=self._run, name=f"mftb-writer:{self.run_dir.name}", daemon=True)
        self._thread.start()

    # -- producer side (any thread) -------------------------------------------------------------
    def add_scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        """Queue one step's scalars. ``values`` must not be mutated afterwards."""
        if len(self._pending) == self._max_queue:
            self._dropped += 1
        self._pending.append((_SCALARS, step, wall_time or time.time(), values))

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

    def add_built(self, step: int, build: Callable[[int, float], event_pb2.Event]) -> None:
        """Queue a rare, structured record (hparams, a graph): ``build(step, wall_time)`` makes the
        Event on the writer thread, so the caller neither encodes nor waits."""
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
        _forget(self)

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
            if time.monotonic() >= next_flush:
                self._flush_file()
                next_flush = time.monotonic() + self.flush_secs

    def _drain(self) -> bool:
        """Write all queued items. Returns True once a close request has been handled."""
        pending = self._pending
        while pending:
            item = pending.popleft()
            kind = item[0]
            if kind == _SCALARS:
                self._write(encode_scalars_event, item[1], item[2], item[3])
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
                item[1].set()
            elif kind == _CLOSE:
                self._report_dropped()  # also when the stall ends only at close
                self._flush_file()
                self._close_file()
                item[1].set()
                return True
        self._report_dropped()
        return False

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
            self._warn_once("recovered", f"TensorBoard writer for {self.run_dir}: writing works again, monitoring resumed.")

    def _build_guarded(
        self, build: Callable[[int, float], event_pb2.Event], step: int, wall_time: float
    ) -> event_pb2.Event | None:
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


# ---------------------------------------------------------------------------------------------
# Per-process registry, exit and SIGTERM handling
# ---------------------------------------------------------------------------------------------

_registry: dict[Path, RunWriter] = {}
_registry_lock = threading.Lock()
_exit_hooks_installed = False


def get_writer(run_dir: str | os.PathLike, flush_secs: float = 5.0, max_queue: int = 100_000) -> RunWriter:
    """The process's one open writer for ``run_dir``, created on first use."""
    key = Path(run_dir).resolve()
    with _registry_lock:
        writer = _registry.get(key)
        if writer is None or writer.closed:
            writer = RunWriter(key, flush_secs=flush_secs, max_queue=max_queue)
            _registry[key] = writer
        _install_exit_hooks()
        return writer


def _forget(writer: RunWriter) -> None:
    with _registry_lock:
        if _registry.get(writer.run_dir) is writer:
            del _registry[writer.run_dir]


def close_all(timeout: float = 30.0) -> None:
    """Close every open writer (all queued points reach the disk)."""
    with _registry_lock:
        writers = list(_registry.values())
    for writer in writers:
        writer.close(timeout=timeout)


def _install_exit_hooks() -> None:
    global _exit_hooks_installed
    if _exit_hooks_installed:
        return
    _exit_hooks_installed = True
    atexit.register(close_all)
    if threading.current_thread() is threading.main_thread():
        _chain_sigterm()


_sigterm_listeners: list[Callable[[], None]] = []


def on_sigterm(listener: Callable[[], None]) -> None:
    """Run ``listener`` (before the writers close) when SIGTERM arrives."""
    _sigterm_listeners.append(listener)


def remove_sigterm_listener(listener: Callable[[], None]) -> None:
    if listener in _sigterm_listeners:
        _sigterm_listeners.remove(listener)


def _chain_sigterm() -> None:
    previous = signal.getsignal(signal.SIGTERM)

    def handle_sigterm(signum: int, frame: Any) -> None:
        for listener in list(_sigterm_listeners):
            try:
                listener()
            except Exception:  # a listener must not prevent closing
                logger.exception("mindformers_tbplugin SIGTERM listener failed")
        close_all(timeout=10.0)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            # Die of SIGTERM as the process would have without us, so exit codes stay honest.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    with contextlib.suppress(ValueError, OSError):  # not the main thread of the main interpreter
        signal.signal(signal.SIGTERM, handle_sigterm)
