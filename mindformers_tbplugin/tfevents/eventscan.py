"""Read event files record by record (framing and CRC checked), keeping only small per-file summaries.

Memory stays flat whatever the file size: one record is held at a time, and a file's summary holds
counters per tag, never the points themselves.
"""

from __future__ import annotations

import os
import re
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tensorboard.compat.proto import event_pb2

# The writer owns the framing; checking with its own function keeps one definition of the checksum.
from mindformers_tbplugin.tfevents.writer import _masked_crc as masked_crc

EVENT_FILE_MARKER = "tfevents"  # TensorBoard opens only files whose name contains it
_HEADER = 12  # uint64 length + masked CRC32C of the length
_FOOTER = 4  # masked CRC32C of the payload
# events.out.tfevents.<stamp>.<host>[.<pid>.<serial>][suffix]; torch/mftb add the pid, tensorboardX does not.
_NAME = re.compile(r"\.tfevents\.(\d+)\.(.+?)(?:\.(\d+)\.(\d+))?(\.[^.\d][^.]*)?$")
MAX_KEPT_JUMPS = 20
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "site-packages", ".cache"}


@dataclass(frozen=True)
class Backstep:
    """A tag's step lower than its previous one, with no ``SessionLog.START`` purging the earlier points."""

    path: Path
    tag: str
    from_step: int
    to_step: int


@dataclass
class StepTracker:
    """Each tag's last step across a run's files, as TensorBoard orders them.

    Steps are compared per tag: tags may use different x axes (``train/loss_vs_samples`` counts samples).
    A ``SessionLog.START`` at step p makes TensorBoard drop every tag's points at or after p.
    """

    last: dict[str, int] = field(default_factory=dict)
    jumps: list[Backstep] = field(default_factory=list)  # the first MAX_KEPT_JUMPS, to show
    jump_count: int = 0

    def start(self, step: int) -> None:
        for tag, last in self.last.items():
            if last >= step:
                self.last[tag] = step - 1

    def see(self, path: Path, tag: str, step: int) -> None:
        previous = self.last.get(tag)
        if previous is not None and step < previous:
            self.jump_count += 1
            if len(self.jumps) < MAX_KEPT_JUMPS:
                self.jumps.append(Backstep(path, tag, previous, step))
        self.last[tag] = step


@dataclass
class FileScan:
    path: Path
    size: int
    mtime: float
    records: int = 0
    valid_bytes: int = 0  # everything up to here is complete, checksummed records
    problem: str | None = None  # "torn" (ends mid-record) or "corrupt" (a checksum does not match)
    min_step: int | None = None
    max_step: int | None = None
    first_wall: float | None = None
    last_wall: float | None = None
    starts: list[int] = field(default_factory=list)  # steps of SessionLog.START events
    points: Counter[str] = field(default_factory=Counter)  # scalar points per tag

    @property
    def writer(self) -> str:
        """Who wrote the file, from its name: ``host pid N`` when the name carries a pid, else ``host``."""
        match = _NAME.search(self.path.name)
        if match is None:
            return self.path.name
        host, pid = match.group(2), match.group(3)
        return f"{host} pid {pid}" if pid else host


def iter_records(handle) -> Iterator[tuple[int, bytes | None, str | None]]:
    """Yield ``(offset, payload, None)`` per record, finally ``(offset, None, problem)`` if the file is damaged."""
    offset = 0
    while True:
        header = handle.read(_HEADER)
        if not header:
            return
        if len(header) < _HEADER:
            yield offset, None, "torn"
            return
        if masked_crc(header[:8]) != header[8:]:
            yield offset, None, "corrupt"
            return
        (length,) = struct.unpack("<Q", header[:8])
        body = handle.read(length + _FOOTER)
        if len(body) < length + _FOOTER:
            yield offset, None, "torn"
            return
        payload = body[:length]
        if masked_crc(payload) != body[length:]:
            yield offset, None, "corrupt"
            return
        yield offset, payload, None
        offset += _HEADER + length + _FOOTER


def scan_file(path: Path, steps: StepTracker | None = None) -> FileScan:
    """Summarize one event file; ``steps`` (shared by the run's files, in order) collects steps going back."""
    stat = path.stat()
    scan = FileScan(path, stat.st_size, stat.st_mtime)
    steps = steps if steps is not None else StepTracker()
    with open(path, "rb") as handle:
        for offset, payload, problem in iter_records(handle):
            if problem is not None:
                scan.problem = problem
                break
            scan.records += 1
            scan.valid_bytes = offset + _HEADER + len(payload) + _FOOTER
            try:
                # A fresh message per record: re-parsing into one message grows its arena without bound (upb).
                event = event_pb2.Event.FromString(payload)
            except Exception:  # a checksummed record that is no Event: not ours to judge
                continue
            if event.wall_time:
                scan.first_wall = scan.first_wall or event.wall_time
                scan.last_wall = event.wall_time
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                scan.starts.append(event.step)
                steps.start(event.step)
                continue
            if not event.HasField("summary"):
                continue
            step = event.step
            for value in event.summary.value:
                if value.HasField("simple_value") or value.metadata.plugin_data.plugin_name == "scalars":
                    scan.points[value.tag] += 1
                steps.see(path, value.tag, step)
            scan.min_step = step if scan.min_step is None else min(scan.min_step, step)
            scan.max_step = step if scan.max_step is None else max(scan.max_step, step)
    return scan


def event_files(run_dir: Path) -> list[Path]:
    """The run's event files in the order TensorBoard reads them (by name: the name starts with the time)."""
    return sorted(p for p in run_dir.iterdir() if EVENT_FILE_MARKER in p.name and p.is_file())


def walk_runs(root: Path, max_depth: int | None = None, max_dirs: int | None = None) -> Iterator[Path]:
    """Folders under ``root`` (itself included) holding event files: TensorBoard's runs."""
    for visited, (folder, subdirs, files) in enumerate(os.walk(root), start=1):
        depth = len(Path(folder).relative_to(root).parts)
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIP_DIRS and not d.startswith("."))
        if max_depth is not None and depth >= max_depth:
            subdirs.clear()
        if any(EVENT_FILE_MARKER in name for name in files):
            yield Path(folder)
        if max_dirs is not None and visited >= max_dirs:
            return
