"""One append-only ``events.out.tfevents.*`` file."""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2

from mindformers_tbplugin.tfevents.events import file_version_event
from mindformers_tbplugin.tfevents.records import frame_record

_file_counter = itertools.count()


class EventFile:
    """A new event file in ``run_dir``. Not thread-safe: the writer thread owns it.

    The name starts with the time (TensorBoard reads a run's files in name order) and carries the
    host, pid and a per-process serial, so two writers never open the same file. The serial is
    zero-padded so that files opened in the same second still sort in the order they were opened.
    """

    def __init__(self, run_dir: Path, filename_suffix: str = "") -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        stamp, host, pid, serial = int(time.time()), socket.gethostname(), os.getpid(), next(_file_counter)
        name = f"events.out.tfevents.{stamp:010d}.{host}.{pid}.{serial:06d}{filename_suffix}"
        self.path = run_dir / name
        self._file = open(self.path, "ab")  # noqa: SIM115 - lives as long as the writer
        self.write(file_version_event(time.time()))

    def write(self, event: event_pb2.Event | bytes) -> None:
        """Append one record: an ``Event`` or its serialised bytes."""
        payload = event if isinstance(event, bytes) else event.SerializeToString()
        self._file.write(frame_record(payload))

    def write_framed(self, records: bytes) -> None:
        """Append records already framed (see :mod:`.scalar_blocks`)."""
        self._file.write(records)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
