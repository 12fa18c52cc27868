"""The run's status record (pipeline/status_record.py), kept by the main run's writer thread: it sees each
step the writer writes, and rewrites the record every RECORD_EVERY_SECS, at the first step, when an alert
is reported, and once more when the writer closes (with how the training ended). The training thread
only sets the end state; a record costs the writer thread one small file and a rename.
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Mapping
from pathlib import Path

from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.run import Run
from mindformers_tbplugin.pipeline.status_record import FAILED, RUNNING, StatusRecord
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.session.run_folder import RankHost
from mindformers_tbplugin.tfevents.writer import RunWriter


def owner() -> str:
    """The login name that started the process (its uid where none is known)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


class StatusWriter:
    def __init__(
        self,
        run_dir: Path,
        experiment: str,
        topology: Topology,
        hosts: list[RankHost],
        run: Run,
        total_steps: int | None,
        resumed_from: int | None,
    ) -> None:
        names = sorted({host.host for host in hosts})
        now = time.time()
        self.record = StatusRecord(
            experiment=experiment,
            run=run.name,
            owner=owner(),
            hosts=names[: status_record.MAX_HOST_NAMES],
            host_count=len(names),
            world_size=topology.world_size,
            started=now,
            total_steps=total_steps,
            resumed_from=resumed_from,
        )
        self.run_dir = run_dir
        self._run = run
        self._alerts_seen = 0
        self._due = 0.0  # the first drain writes the record: the run is listed from its start
        self._warn_once = WarnOnce()

    def attach(self, writer: RunWriter) -> None:
        writer.on_scalars = self.saw
        writer.after_drain = self.drained

    def saw(self, step: int, values: Mapping[str, float]) -> None:
        first = self.record.step is None
        self.record.see(step, values, time.time())
        if first:
            self._due = 0.0

    def end(self, state: str, detail: str) -> None:
        """On the training thread, before the writer closes: how the training ended."""
        self.record.state, self.record.detail = state, detail

    def drained(self, closing: bool) -> None:
        alerts = self._run.alerts
        now = time.monotonic()
        if not closing and now < self._due and len(alerts) == self._alerts_seen:
            return
        record = self.record
        if alerts:
            self._alerts_seen = len(alerts)
            record.alerts = len(alerts)
            record.alert_rules = sorted({rule for rule, _, _ in alerts})
            record.last_incident_step = next((step for _, step, has in reversed(alerts) if has), None)
        if closing and record.state == RUNNING:  # the writer closed before the training's end reached us
            record.state, record.detail = FAILED, f"the process ended during training, after step {record.step}"
        record.updated = time.time()
        try:
            status_record.write(self.run_dir, record)
        except OSError as exc:  # monitoring never stops training: the listing shows the last record
            self._warn_once("status", f"TensorBoardMonitor: cannot write the run's status record ({exc})")
        self._due = now + status_record.RECORD_EVERY_SECS
