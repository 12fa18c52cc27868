"""``mftb runs``' table: one line per run, columns as wide as their widest cell."""

from __future__ import annotations

import time
from datetime import datetime

from mindformers_tbplugin.pipeline.status_record import FAILED, STALE
from mindformers_tbplugin.viewer.runs_table import UNREADABLE, RunRow

COLUMNS = (
    "RUN",
    "EXPERIMENT",
    "OWNER",
    "HOSTS",
    "WORLD",
    "STARTED",
    "DURATION",
    "STATE",
    "STEP",
    "LOSS",
    "TOK/S/DEV",
    "MFU",
    "ALERTS",
    "INCIDENT",
)
_NONE = "-"


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return _NONE
    seconds = max(int(seconds), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"


def _number(value: float | None, digits: int) -> str:
    return _NONE if value is None else f"{value:.{digits}g}" if abs(value) < 1e5 else f"{value:.0f}"


def note(row: RunRow, now: float) -> str:
    """What follows a row's cells: why it cannot be read, how it failed, since when it is stale."""
    if row.state == UNREADABLE:
        return row.problem
    if row.state == FAILED:
        return row.detail
    if row.state == STALE and row.updated is not None:
        return f"last written {duration_text(now - row.updated)} ago"
    return ""


def cells(row: RunRow) -> list[str]:
    if row.state == UNREADABLE:
        return [row.run, *[_NONE] * 6, row.state, *[_NONE] * 6]
    hosts = _NONE
    if row.hosts:
        extra = (row.host_count or len(row.hosts)) - 1
        hosts = row.hosts[0] + (f" +{extra}" if extra > 0 else "")
    step = _NONE if row.step is None else str(row.step)
    if row.total_steps is not None:
        step += f"/{row.total_steps}"
    alerts = _NONE if row.alerts is None else str(row.alerts)
    if row.alert_rules:
        alerts += f" ({','.join(row.alert_rules)})"
    started = _NONE if row.started is None else datetime.fromtimestamp(row.started).strftime("%Y-%m-%d %H:%M")
    return [
        row.run,
        row.experiment or _NONE,
        row.owner or _NONE,
        hosts,
        _NONE if row.world_size is None else str(row.world_size),
        started,
        duration_text(row.duration),
        row.state,
        step,
        _number(row.loss, 5),
        _number(row.tokens_per_s_per_device, 4),
        _NONE if row.mfu is None else f"{row.mfu:.1%}",
        alerts,
        _NONE if row.last_incident_step is None else str(row.last_incident_step),
    ]


def table(rows: list[RunRow], now: float | None = None) -> list[str]:
    """The header and one line per row (its note, if any, at the end)."""
    now = time.time() if now is None else now
    grid = [list(COLUMNS), *(cells(row) for row in rows)]
    notes = ["", *(note(row, now) for row in rows)]
    widths = [max(len(line[i]) for line in grid) for i in range(len(COLUMNS))]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(line, widths, strict=True)), text]).rstrip()
        for line, text in zip(grid, notes, strict=True)
    ]


def summary(rows: list[RunRow], shown: int, root: str, seconds: float) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    states = ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))
    at = time.strftime("%H:%M:%S")
    return f"{shown} of {len(rows)} runs under {root} ({states or 'none'}); read in {seconds:.2f} s at {at}"
