"""One row of the runs table (``mftb runs``, the ``runs`` dashboard), and the states a row can be in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mindformers_tbplugin.pipeline import status_record

UNKNOWN = "unknown"  # no status record, and the event files do not say how the training ended
UNREADABLE = "unreadable"
STATES = (
    status_record.STARTING,
    status_record.RUNNING,
    status_record.STALE,
    status_record.FAILED,
    status_record.STOPPED,
    status_record.FINISHED,
    UNKNOWN,
    UNREADABLE,
)
FROM_RECORD, FROM_EVENTS = "status record", "event files"


@dataclass
class RunRow:
    run: str  # the folder relative to the root, as TensorBoard names the run
    state: str
    source: str = FROM_RECORD
    problem: str = ""  # why the folder could not be read (state unreadable)
    experiment: str = ""
    owner: str = ""
    hosts: list[str] = field(default_factory=list)
    host_count: int | None = None
    world_size: int | None = None
    started: float | None = None
    updated: float | None = None  # the last write seen (the record's, or the event files' time)
    duration: float | None = None
    detail: str = ""
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    tokens_per_s_per_device: float | None = None
    mfu: float | None = None
    alerts: int | None = None
    alert_rules: list[str] = field(default_factory=list)
    last_incident_step: int | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)  # dataclasses.asdict deep-copies: 3 times as long over 10,000 rows
