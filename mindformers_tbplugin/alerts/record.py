"""The alert record: what every rule fires and every sink receives."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Alert:
    """One fired rule. ``baseline`` is what the value was compared against (None when nothing was)."""

    rule: str
    tag: str
    step: int
    value: float
    baseline: float | None
    message: str
    severity: str
    action: str = "warn"
    run: str = ""
    incident: dict[str, Any] | None = None  # ranks, layers, checkpoint, resume (alerts/incident.py)

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self)
        if record["incident"] is None:  # a stall has none: its record stays as it was
            del record["incident"]
        for key in ("value", "baseline"):  # JSON has no NaN/Inf: spell them as strings
            if isinstance(record[key], float) and not math.isfinite(record[key]):
                record[key] = str(record[key])
        return record
