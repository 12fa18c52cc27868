"""Every run under a root, one row each, for ``mftb runs`` and the ``runs`` dashboard.

A row comes from the run's status record (pipeline/status_record.py): one small file per run, so that
10,000 runs list in about a second. A run without one (written by an older release, or a plain
TensorBoard folder such as ``mftb import`` writes) gets a row from what is cheap to read
(:mod:`.run_tails`). A run of a record that says ``running`` but went stale also gets its event file's
tail read, for the step it really reached. A folder that cannot be read gets a row saying why.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.status_record import RUNNING, STALE, STARTING, STATUS_FILE, RecordError
from mindformers_tbplugin.tfevents.run_folders import EVENT_FILE_MARKER
from mindformers_tbplugin.viewer import run_tails
from mindformers_tbplugin.viewer.run_row import FROM_EVENTS, STATES, UNKNOWN, UNREADABLE, RunRow

_RANK_RUN = re.compile(r"rank_\d+$")  # a multi-rank job's per-rank runs, inside its run folder


def run_folders(root: Path) -> Iterator[tuple[str, list[str]]]:
    """``(folder, its file names)`` of every run under ``root`` (itself included): a folder holding a status
    record or an event file. A run's ``rank_<id>`` folders belong to it and are not entered, nor any folder
    of a monitored run (one with a status record: its ``baseline`` and other sub-runs); hidden
    folders are skipped. A folder that cannot be listed is yielded with no names (its row says so).
    Folders are plain strings: 10,000 runs list in about a second, and pathlib's objects would double it."""
    top = os.fspath(root).rstrip(os.sep) or os.sep
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                names, subfolders = [], []
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        subfolders.append(entry.name)
                    else:
                        names.append(entry.name)
        except OSError:
            if folder != top:
                yield folder, []
            continue
        is_run = STATUS_FILE in names or any(EVENT_FILE_MARKER in name for name in names)
        if is_run:
            yield folder, names
        subfolders.sort(reverse=True)
        if STATUS_FILE in names:
            continue
        stack.extend(f"{folder}{os.sep}{name}" for name in subfolders if not (is_run and _RANK_RUN.match(name)))


def list_runs(root: Path, stale_after: float, now: float | None = None) -> list[RunRow]:
    """A row for every run under ``root``, at ``now`` (default: the current time)."""
    now = time.time() if now is None else now
    top = os.fspath(root).rstrip(os.sep) or os.sep
    return [row_of(top, folder, names, now, stale_after) for folder, names in run_folders(root)]


def row_of(root: str, folder: str, names: list[str], now: float, stale_after: float) -> RunRow:
    name = folder[len(root) :].lstrip(os.sep).replace(os.sep, "/") or "."
    if not names:
        return RunRow(name, UNREADABLE, source="", problem="the folder cannot be listed (permissions?)")
    events = sorted(n for n in names if EVENT_FILE_MARKER in n)
    if STATUS_FILE not in names:
        row = RunRow(name, UNKNOWN, source=FROM_EVENTS)
        return run_tails.row_from_events(row, Path(folder), events, now, stale_after)
    try:
        with open(f"{folder}{os.sep}{STATUS_FILE}", "rb") as handle:
            record = status_record.decode(handle.read())
    except (OSError, RecordError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        return RunRow(name, UNREADABLE, problem=f"{STATUS_FILE}: {reason}")
    state = status_record.state_at(record, now, stale_after)
    row = RunRow(
        name,
        state,
        experiment=record.experiment,
        owner=record.owner,
        hosts=record.hosts,
        host_count=record.host_count,
        world_size=record.world_size,
        started=record.started,
        updated=record.updated,
        duration=(now if state in (STARTING, RUNNING) else record.updated) - record.started,
        detail=record.detail,
        step=record.step,
        total_steps=record.total_steps,
        loss=record.loss,
        tokens_per_s_per_device=record.tokens_per_s_per_device,
        mfu=record.mfu,
        alerts=record.alerts,
        alert_rules=record.alert_rules,
        last_incident_step=record.last_incident_step,
    )
    if state == STALE and events:  # how far it really got: the record may be up to a cadence behind
        run_tails.advance(row, Path(folder, events[-1]))
    return row


# -- choosing and ordering rows -------------------------------------------------------------------------
def normal_state(text: str) -> str:
    """A state as a user types it (``stopped-by-alert``, ``Stale``); ValueError names the allowed ones."""
    wanted = re.sub(r"[\s_-]+", " ", text.strip().lower())
    if wanted not in STATES:
        raise ValueError(f"unknown state {text!r}; allowed: {', '.join(STATES)}")
    return wanted


_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_SECS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float) -> float:
    """``2h``, ``30m``, ``7d`` (ago), or a local date and time ``2026-12-07``, ``2026-12-07T09:30``:
    seconds since the epoch. ValueError says what is allowed."""
    ago = _AGO.match(text.strip())
    if ago:
        return now - float(ago.group(1)) * _UNIT_SECS[ago.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(
            f"cannot read --since {text!r}: give a time ago (30m, 2h, 7d, 1w) or a local date and time "
            "(2026-12-07, 2026-12-07T09:30)"
        ) from None


def select(
    rows: list[RunRow], states: set[str] | None = None, since: float | None = None, experiment: str | None = None
) -> list[RunRow]:
    """The rows in ``states``, started at or after ``since``, whose experiment matches the glob ``experiment``."""
    return [
        row
        for row in rows
        if (not states or row.state in states)
        and (since is None or (row.started is not None and row.started >= since))
        and (experiment is None or fnmatch.fnmatchcase(row.experiment, experiment))
    ]


_LAST = float("inf")
# Each key's natural order (newest, furthest, highest first; loss lowest first); rows without the value last.
SORT_KEYS: dict[str, Any] = {
    "start": lambda r: -r.started if r.started is not None else _LAST,
    "updated": lambda r: -r.updated if r.updated is not None else _LAST,
    "run": lambda r: r.run,
    "experiment": lambda r: (r.experiment, r.run),
    "owner": lambda r: (r.owner, r.run),
    "state": lambda r: (STATES.index(r.state), r.run),
    "step": lambda r: -r.step if r.step is not None else _LAST,
    "loss": lambda r: r.loss if r.loss is not None else _LAST,
    "duration": lambda r: -r.duration if r.duration is not None else _LAST,
    "tokens": lambda r: -r.tokens_per_s_per_device if r.tokens_per_s_per_device is not None else _LAST,
    "mfu": lambda r: -r.mfu if r.mfu is not None else _LAST,
    "alerts": lambda r: -r.alerts if r.alerts is not None else _LAST,
}


def sort_rows(rows: list[RunRow], key: str = "start", reverse: bool = False) -> list[RunRow]:
    return sorted(rows, key=SORT_KEYS[key], reverse=reverse)
