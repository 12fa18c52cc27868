"""One tensor-summary tag's records in every run under a logdir, read straight from the event files.

TensorBoard's data provider keeps only a reservoir sample of tensor events, so the ``ranks`` and ``moe``
plugins read the files themselves: each file through
:class:`~mindformers_tbplugin.tfevents.records.RecordReader`, which resumes where the previous pass
stopped, and only records whose bytes contain the tag are parsed. Each record also says where its
bytes are, so that a store may keep only what it derives from a record and read the record again.
:class:`RecordsRun` is what both stores do with a run's new records: layouts, and resumes rewriting steps.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar

import numpy as np
from tensorboard.compat.proto import types_pb2

from mindformers_tbplugin.log import logger
from mindformers_tbplugin.tfevents.decode import decode_event, tensor_array
from mindformers_tbplugin.tfevents.records import RecordReader
from mindformers_tbplugin.tfevents.run_folders import event_files, walk_runs

_DTYPES = {types_pb2.DT_HALF: "<f2", types_pb2.DT_FLOAT: "<f4"}


@dataclass(frozen=True)
class Where:
    """A record's payload in its event file."""

    path: Path
    offset: int
    size: int


@dataclass(frozen=True)
class TensorRecord:
    step: int
    array: np.ndarray  # float16, in the shape written
    content: bytes  # the plugin content: the layout on a writer's first record, else empty
    where: Where


def parse(payload: bytes, tag: str, plugin_name: str, where: Where) -> TensorRecord | None:
    """The record of ``tag`` in one serialised Event; None when it holds none (or not as a tensor)."""
    event = decode_event(payload)
    if event is None:  # a checksummed record that is no Event: not ours
        return None
    for value in event.values:
        if value.tag != tag or value.plugin_name not in ("", plugin_name) or value.tensor is None:
            continue
        code, dims, content = tensor_array(value.tensor)
        dtype = _DTYPES.get(code)
        if dtype is None or int(np.prod(dims)) * np.dtype(dtype).itemsize != len(content):
            return None
        array = np.frombuffer(content, dtype).reshape(dims).astype(np.float16, copy=False)
        return TensorRecord(event.step, array, value.plugin_content, where)
    return None


class TensorRecordFiles:
    """The records of one tag in one run folder's event files, each file read where the last pass stopped."""

    def __init__(self, folder: Path, tag: str, plugin_name: str) -> None:
        self.folder = folder
        self.tag = tag
        self.plugin_name = plugin_name
        self._tag_bytes = tag.encode("utf-8")
        self._readers: dict[Path, RecordReader] = {}

    def batches(self, size: int) -> Iterator[list[TensorRecord]]:
        """The new records in file order, in lists of at most ``size`` (numpy per list, not per record)."""
        try:
            files = event_files(self.folder)
        except OSError:
            files = []
        for path in files:
            reader = self._readers.setdefault(path, RecordReader(path))
            found: list[TensorRecord] = []
            for base, buf, spans in reader.chunks():
                for start, stop, intact in spans:
                    if intact and buf.find(self._tag_bytes, start, stop) >= 0:  # most records are scalars
                        where = Where(path, base + start, stop - start)
                        record = parse(buf[start:stop], self.tag, self.plugin_name, where)
                        if record is not None:
                            found.append(record)
                    if len(found) == size:
                        yield found
                        found = []
            if found:
                yield found

    def read_again(self, where: Where) -> TensorRecord | None:
        """A record read earlier, from its file (None when the file no longer holds it)."""
        try:
            with open(where.path, "rb") as handle:
                handle.seek(where.offset)
                payload = handle.read(where.size)
        except OSError:
            return None
        return parse(payload, self.tag, self.plugin_name, where) if len(payload) == where.size else None


class Layout(Protocol):
    @classmethod
    def from_content(cls, content: bytes) -> Layout: ...


@dataclass
class RecordsRun(ABC):
    """One run of a plugin's records, read as its files grow. A subclass names the tag, the layout class
    and how often the files are read again, and says which records it accepts and how it keeps them."""

    TAG: ClassVar[str] = ""
    PLUGIN_NAME: ClassVar[str] = ""
    LAYOUT: ClassVar[type[Layout]]
    BATCH: ClassVar[int] = 256  # records handed to _store at once: numpy per batch, not per record

    folder: Path
    count: int = 0
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cache: dict = field(default_factory=dict)  # for the views: results over the records so far, by key
    read_at: float = float("-inf")
    lock: threading.Lock = field(default_factory=threading.Lock)
    files: TensorRecordFiles = field(init=False)

    def __post_init__(self) -> None:
        self.files = TensorRecordFiles(self.folder, self.TAG, self.PLUGIN_NAME)

    @abstractmethod
    def reload_secs(self) -> float:
        """The files are read again at most this often (requests come in bursts)."""
        ...

    @abstractmethod
    def _use_layout(self, layout: Layout) -> None:
        """A writer's first record brought ``layout``; the records after it are under it."""
        ...

    @abstractmethod
    def _accepts(self, record: TensorRecord) -> bool:
        """Whether ``record`` fits the layout in force."""
        ...

    @abstractmethod
    def _store(self, batch: list[TensorRecord]) -> None:
        """Append ``batch`` (accepted records, steps increasing past the last one kept)."""
        ...

    @abstractmethod
    def _truncate(self, keep: int) -> None:
        """Keep the first ``keep`` records."""
        ...

    def refresh(self) -> None:
        """Read what was appended to the run's event files since the previous call."""
        with self.lock:
            if time.monotonic() - self.read_at < self.reload_secs():
                return
            for batch in self.files.batches(self.BATCH):
                self._append(batch)
            self.read_at = time.monotonic()

    def _append(self, records: list[TensorRecord]) -> None:
        batch: list[TensorRecord] = []
        for record in records:
            if record.content:
                self._store(batch)  # the records before a new layout are stored under the old one
                batch = []
                try:
                    layout = self.LAYOUT.from_content(record.content)
                except (ValueError, TypeError, KeyError) as exc:
                    logger.warning("%s: unreadable layout at step %d: %s", record.where.path, record.step, exc)
                else:
                    self._use_layout(layout)
            if not self._accepts(record):
                continue
            last = batch[-1].step if batch else int(self.steps[self.count - 1]) if self.count else None
            if last is not None and record.step <= last:
                # A resume from a checkpoint writes these steps again: the later writing wins, as in TensorBoard.
                self._store(batch)
                batch = []
                self._truncate(int(np.searchsorted(self.steps[: self.count], record.step)))
            batch.append(record)
        self._store(batch)


Run = TypeVar("Run", bound=RecordsRun)


class RunCatalog(Generic[Run]):
    """Every run under ``logdir`` (TensorBoard's run names: the folder relative to it, ``.`` for itself),
    each made by ``make_run(folder)``; the logdir is walked again at most every ``discover_secs``."""

    def __init__(self, logdir: Path, make_run: Callable[[Path], Run], discover_secs: float) -> None:
        self.logdir = logdir
        self._make_run = make_run
        self._discover_secs = discover_secs
        self._runs: dict[str, Run] = {}
        self._walked_at = float("-inf")
        self._lock = threading.Lock()

    def _discover(self) -> None:
        with self._lock:
            if time.monotonic() - self._walked_at < self._discover_secs:
                return
            if self.logdir.is_dir():
                for folder, _ in walk_runs(self.logdir):
                    name = folder.relative_to(self.logdir).as_posix()
                    if name not in self._runs:
                        self._runs[name] = self._make_run(folder)
            self._walked_at = time.monotonic()

    def runs(self) -> dict[str, Run]:
        """The runs holding records, read up to now, by name."""
        self._discover()
        found = {}
        for name, run in sorted(self._runs.items()):
            run.refresh()
            if run.count:
                found[name] = run
        return found

    def has_records(self) -> bool:
        """Whether a run read so far holds records (no reading: cheap)."""
        return any(run.count for run in list(self._runs.values()))

    def run(self, name: str) -> Run | None:
        self._discover()
        run = self._runs.get(name)
        if run is None:
            return None
        run.refresh()
        return run if run.count else None
