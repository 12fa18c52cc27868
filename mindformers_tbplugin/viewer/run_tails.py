"""A row for a run without a status record (an older release's, or a plain TensorBoard folder such as
``mftb import`` writes), from what is cheap to read: the folder's name (experiment and start time, when
it has the monitor's ``<experiment>_<YYYYmmdd-HHMMSS>`` form), the event files' names (start time and
host), their owner and modification times (the last write), and the last 16 KiB of the newest one (the
last step, loss, throughput, MFU and ``meta/status``, which says how a monitored training ended).
Nothing else of the event files is read.
"""

from __future__ import annotations

import os
import pwd
import re
import struct
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path

from mindformers_tbplugin.pipeline import metrics, status_record
from mindformers_tbplugin.tfevents.decode import Event, decode_event, tensor_strings
from mindformers_tbplugin.tfevents.records import tail_payloads
from mindformers_tbplugin.tfevents.run_folders import TIMESTAMP_FORMAT
from mindformers_tbplugin.viewer.run_row import UNREADABLE, RunRow

_FOLDER = re.compile(r"^(?P<experiment>.+)_(?P<stamp>\d{8}-\d{6})(?:-\d+)?$")
_EVENT_FILE = re.compile(r"\.tfevents\.(?P<time>\d+)\.(?P<host>.+?)(?:\.\d+\.\d+)?(?:\.[^.\d][^.]*)?$")
# meta/status texts (session/monitor_session.py, pipeline/run.py's AlertStop) by how they begin
_ENDINGS = (
    ("completed", status_record.FINISHED),
    ("stopped by AlertMonitor", status_record.STOPPED),
    ("failed", status_record.FAILED),
    ("terminated", status_record.FAILED),
)


WINDOWS = (16 << 10, 256 << 10)
ENOUGH_RECORDS = 8
_NUMBERS = {metrics.TRAIN_LOSS: "loss", metrics.PERF_TOKENS_PER_S: "tokens_per_s", metrics.PERF_MFU: "mfu"}


@dataclass
class Tail:
    step: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    status: str = ""  # the last meta/status text
    seen: set[str] = field(default_factory=set)  # the tags whose newest value was taken


def read_tail(path: Path) -> Tail:
    """What the last records of one event file say (OSError when it cannot be read): the last 16 KiB,
    or 256 KiB when those hold no step (large records at the end), decoded newest first until the step
    and loss are known and a few more records were seen (``meta/status`` is among the last ones)."""
    for window in WINDOWS:
        tail = Tail()
        for seen, payload in enumerate(reversed(tail_payloads(path, window))):
            if seen >= ENOUGH_RECORDS and tail.step is not None and metrics.TRAIN_LOSS in tail.seen:
                break
            event = decode_event(payload)
            if event is not None:
                _take(tail, event)
        if tail.step is not None:
            break
    return tail


def _take(tail: Tail, event: Event) -> None:
    """An older record's values, where a newer one has not set them."""
    if any(metrics.on_step_axis(value.tag) for value in event.values) and (tail.step is None or event.step > tail.step):
        tail.step = event.step
    for value in event.values:
        if value.tag == metrics.META_STATUS and value.tensor is not None and not tail.status:
            texts = tensor_strings(value.tensor)
            tail.status = texts[0].decode("utf-8", "replace") if texts else ""
        elif value.simple_value is not None and value.tag in _NUMBERS and value.tag not in tail.seen:
            tail.seen.add(value.tag)  # the newest value, even a NaN (said as none)
            setattr(tail, _NUMBERS[value.tag], status_record.finite(value.simple_value))


def advance(row: RunRow, path: Path) -> None:
    """A stale record's row: the step and loss its newest event file reached past the record, if any."""
    try:
        tail = read_tail(path)
    except (OSError, struct.error):
        return
    if tail.step is not None and (row.step is None or tail.step > row.step):
        row.step = tail.step
        row.loss = tail.loss if tail.loss is not None else row.loss


def row_from_events(row: RunRow, folder: Path, events: list[str], now: float, stale_after: float) -> RunRow:
    """Fill ``row`` (state UNKNOWN) from the folder's name and event files (``events``: their names, sorted)."""
    named = _FOLDER.match(folder.name)
    row.experiment = named.group("experiment") if named else folder.name
    files = [_EVENT_FILE.search(name) for name in events]
    row.hosts = sorted({found.group("host") for found in files if found})
    row.host_count = len(row.hosts) or None
    try:
        if named:
            row.started = datetime.strptime(named.group("stamp"), TIMESTAMP_FORMAT).timestamp()
        elif files and files[0]:
            row.started = float(files[0].group("time"))
        stats = [os.stat(folder / name) for name in events]
        row.updated = max(stat.st_mtime for stat in stats)
        row.owner = _login(stats[-1].st_uid)
        tail = read_tail(folder / events[-1])
    except (OSError, struct.error, ValueError) as exc:
        row.state, row.problem = UNREADABLE, f"{events[-1]}: {getattr(exc, 'strerror', None) or exc}"
        return row
    row.step, row.loss, row.mfu = tail.step, tail.loss, tail.mfu
    row.tokens_per_s_per_device = None  # the world size is not known here: not per device
    row.detail = tail.status
    ended = next((state for start, state in _ENDINGS if tail.status.startswith(start)), None)
    if ended is not None:
        row.state = ended
    elif now - row.updated <= stale_after:
        row.state = status_record.RUNNING
    if row.started is not None:
        row.duration = row.updated - row.started
    return row


@cache
def _login(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
