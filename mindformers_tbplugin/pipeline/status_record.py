"""A run's status record: one small JSON file in the run folder, rewritten whole (a temporary file, then
``os.replace``) by the run's writer thread, so that ``mftb runs`` and the ``runs`` dashboard list
thousands of runs without reading their event files.

The record says who started the run, where it runs, how far it got and how it ended. ``starting`` and
``stale`` are not written: a reader derives them (:func:`state_at`), ``starting`` from a running record
with no step yet whose process still rewrites it (loading, compiling), ``stale`` from a running record
that stopped being rewritten (a killed or lost process) or whose steps stopped advancing (a hung one).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from mindformers_tbplugin.pipeline import metrics

STATUS_FILE = "mftb_status.json"  # no "tfevents" in the name: TensorBoard ignores it
FORMAT = 1
RECORD_EVERY_SECS = 15.0  # while training runs: four records a minute
DEFAULT_STALE_AFTER_SECS = 300.0  # twenty records missed
HUNG_INTERVALS = 3  # a record whose steps stopped advancing for this many of its own step intervals...
RUNNING, FINISHED, FAILED, STOPPED, STALE = "running", "finished", "failed", "stopped by alert", "stale"
STARTING = "starting"  # running, no step written yet
ENDED = (FINISHED, FAILED, STOPPED)
MAX_HOST_NAMES = 8  # a record names the first hosts; ``host_count`` counts them all


@dataclass
class StatusRecord:
    """The record's fields (times are seconds since the epoch; None: not known or not written yet)."""

    experiment: str = ""
    run: str = ""  # the run folder, relative to the log_dir it was written under
    owner: str = ""  # the login name that started the training
    hosts: list[str] = field(default_factory=list)
    host_count: int = 0
    world_size: int = 1
    started: float = 0.0
    updated: float = 0.0  # when this record was written
    progressed: float | None = None  # when the last new step was written
    step_interval: float | None = None  # seconds between the last two steps written
    state: str = RUNNING
    detail: str = ""  # the run's meta/status text once it ended
    step: int | None = None  # the last step written to the event files
    total_steps: int | None = None
    loss: float | None = None  # the last train/loss written
    loss_step: int | None = None
    tokens_per_s_per_device: float | None = None  # perf/tokens_per_s over the world size
    mfu: float | None = None  # perf/mfu (written with a known peak_tflops)
    alerts: int = 0
    alert_rules: list[str] = field(default_factory=list)
    last_incident_step: int | None = None
    resumed_from: int | None = None
    format: int = FORMAT

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), allow_nan=False, default=str)

    def see(self, step: int, values: dict[str, float], now: float) -> None:
        """One step's values as the main run's writer wrote them (on its thread)."""
        if not any(map(metrics.on_step_axis, values)):
            return  # the x-axis twins' "step" is a sample or token count
        if self.step is None or step > self.step:
            if self.progressed is not None:  # between logged steps (log_every apart), not per step
                self.step_interval = now - self.progressed
            self.step, self.progressed = step, now
        loss = values.get(metrics.TRAIN_LOSS)
        if loss is not None and (self.loss_step is None or step >= self.loss_step):
            self.loss, self.loss_step = finite(loss), step
        tokens = values.get(metrics.PERF_TOKENS_PER_S)
        if tokens is not None:
            self.tokens_per_s_per_device = finite(tokens / max(self.world_size, 1))
        mfu = values.get(metrics.PERF_MFU)
        if mfu is not None:
            self.mfu = finite(mfu)


def finite(value: float) -> float | None:
    """JSON has no NaN or infinity: a diverged loss is written as null with the state saying the rest."""
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


class RecordError(ValueError):
    """A status file that cannot be read as a record: what is wrong with it."""


def decode(text: str | bytes) -> StatusRecord:
    """The record in ``text``; RecordError says what is wrong (a half-written or foreign file)."""
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordError(f"not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise RecordError("not a JSON object")
    for name, kinds in _CHECKED.items():
        value = raw.get(name)
        if not isinstance(value, kinds) or value is True or value is False:
            raise RecordError(f"field {name!r} is {value!r}")
    return StatusRecord(**{key: value for key, value in raw.items() if key in _FIELDS})


_FIELDS = frozenset(f.name for f in fields(StatusRecord))
_NUMBER = (int, float)
_CHECKED: dict[str, tuple[type, ...]] = {  # the fields a record must have, and those a reader computes with
    "started": _NUMBER,
    "updated": _NUMBER,
    "state": (str,),
    "step": (int, type(None)),
    "total_steps": (int, type(None)),
    "loss": (*_NUMBER, type(None)),
    "progressed": (*_NUMBER, type(None)),
    "step_interval": (*_NUMBER, type(None)),
}


def state_at(record: StatusRecord, now: float, stale_after: float) -> str:
    """The record's state as a reader sees it at ``now``: ``stale`` when a running record was not rewritten
    for ``stale_after`` seconds (the process is gone), or no new step came for ``stale_after`` seconds and
    HUNG_INTERVALS of its step intervals (the training hangs); ``starting`` while a rewritten record has no
    step yet (a large model's first graph compile can take longer than any patience a hang is given)."""
    if record.state != RUNNING:
        return record.state
    if now - record.updated > stale_after:
        return STALE
    if record.progressed is None:
        return STARTING
    patience = max(stale_after, HUNG_INTERVALS * (record.step_interval or 0.0))
    return STALE if now - record.progressed > patience else RUNNING


def write(run_dir: Path, record: StatusRecord) -> None:
    """Replace the run's record at once: readers see the old one or the new one, never a part. The
    temporary file is made with the umask's permissions (a team reads it on shared storage)."""
    temporary = run_dir / f".{STATUS_FILE}.{os.getpid()}.tmp"
    try:
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(record.encode())
        os.replace(temporary, run_dir / STATUS_FILE)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
