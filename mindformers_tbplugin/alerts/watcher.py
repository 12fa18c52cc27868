"""Apply alert rules to every run under a log folder, reading only what is new in each event file.

A run is a folder holding ``*tfevents*`` files (named by its path below the log folder); each run
gets its own rule engine, fed its files' points in file-name order, which is creation order for
every common writer.

An alert carries the incident the event files can tell (alerts/incident.py): the highest rank
(``train/loss_max_rank``), the layers (``grad_norm/<group>``) and the step's lr, grad norm and loss
scale; not the data rows or the checkpoint, which only the training knows. So that a step's other
values are read first, a poll's alerts are reported at its end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mindformers_tbplugin.alerts.culprits import GradientCulprits
from mindformers_tbplugin.alerts.engine import AlertEngine, parse_rules
from mindformers_tbplugin.alerts.incident import IncidentRecorder
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.rules import StallRule
from mindformers_tbplugin.framework.data_rows import DataOrder
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.run import Run
from mindformers_tbplugin.tfevents.reader import EventFileReader
from mindformers_tbplugin.tfevents.run_folders import walk_runs

# What an incident reads besides the rules' tags (and grad_norm/<group>).
INCIDENT_TAGS = frozenset(
    {
        metrics.TRAIN_LOSS,
        metrics.TRAIN_LOSS_MAX,
        metrics.TRAIN_LOSS_MAX_RANK,
        metrics.TRAIN_LR,
        metrics.TRAIN_GRAD_NORM,
        metrics.TRAIN_LOSS_SCALE,
    }
)
NO_DATA_ORDER = "mftb watch reads the event files, which do not hold the data order"


@dataclass(frozen=True)
class _Tags:
    """The tags a run's reader returns: a set, and the per-layer gradient norms by their prefix."""

    fixed: frozenset[str]

    def __contains__(self, tag: object) -> bool:
        return tag in self.fixed or (isinstance(tag, str) and tag.startswith(metrics.GRAD_NORM_PREFIX))


@dataclass
class _Run:
    engine: AlertEngine
    read_tags: _Tags | None
    incidents: IncidentRecorder
    culprits: GradientCulprits
    readers: dict[Path, EventFileReader] = field(default_factory=dict)
    held: list[Alert] = field(default_factory=list)  # fired this poll, reported at its end
    step: int | None = None  # the step of the last point read


class Watcher:
    """Follows ``logdir``; ``on_alert`` receives each fired alert (with its run's name)."""

    def __init__(
        self, logdir: str | os.PathLike, rule_specs: Sequence[dict[str, Any]], on_alert: Callable[[Alert], None]
    ):
        self.logdir = Path(logdir)
        self.rule_specs = list(rule_specs)
        parse_rules(self.rule_specs, watcher=True)  # fail before reading anything
        self.on_alert = on_alert
        self.points_read = 0
        self.alerts_fired = 0
        self._runs: dict[Path, _Run] = {}

    @property
    def runs(self) -> list[str]:
        return [self._run_name(folder) for folder in self._runs]

    def poll(self) -> int:
        """Read what was appended since the last poll (new files and runs included). Returns alerts fired."""
        before = self.alerts_fired
        for folder, files in walk_runs(self.logdir, prune=False):  # every run TensorBoard shows
            run = self._runs.get(folder)
            if run is None:
                run = self._runs[folder] = self._new_run(folder)
            for path in files:
                reader = run.readers.get(path)
                if reader is None:
                    reader = run.readers[path] = EventFileReader(path, run.read_tags)
                self._feed(run, reader)
            self._report_held(run)
        return self.alerts_fired - before

    def check_stall(self, now: float | None = None) -> int:
        """Fire stall alerts for runs silent for too long. Returns alerts fired."""
        now = time.time() if now is None else now
        fired = 0
        for run in self._runs.values():
            for alert in run.engine.check_stall(now):
                fired += 1
                self.on_alert(alert)
        self.alerts_fired += fired
        return fired

    def _feed(self, run: _Run, reader: EventFileReader) -> None:
        engine, incidents = run.engine, run.incidents
        observe, progress, remember = engine.observe_point, engine.progress, incidents.remember_value
        count = 0
        for tag, step, value, wall_time in reader.read():
            count += 1
            progress(step, wall_time)
            if step != run.step:
                if run.step is not None:  # the previous step's values are complete: its group norms
                    run.culprits.remember(incidents.written(run.step))
                run.step = step
            remember(step, tag, value)
            fired = observe(tag, step, value)
            if fired:
                run.held.extend(fired)
        self.points_read += count

    def _report_held(self, run: _Run) -> None:
        held, run.held = run.held, []
        for alert in held:
            self.alerts_fired += 1
            self.on_alert(run.incidents.attach(alert))

    def _new_run(self, folder: Path) -> _Run:
        rules = parse_rules(self.rule_specs, watcher=True)
        engine = AlertEngine(rules, run=self._run_name(folder))
        # Stall needs every point's step; other rules their own tags and what an incident reads.
        read_tags = None if any(isinstance(rule, StallRule) for rule in rules) else _Tags(engine.tags | INCIDENT_TAGS)
        culprits = GradientCulprits()
        incidents = IncidentRecorder(Run(), culprits, None, DataOrder(NO_DATA_ORDER))
        return _Run(engine, read_tags, incidents, culprits)

    def _run_name(self, folder: Path) -> str:
        relative = folder.relative_to(self.logdir)
        return "." if relative == Path(".") else relative.as_posix()
