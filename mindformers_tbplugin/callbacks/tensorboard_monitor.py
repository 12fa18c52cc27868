"""``TensorBoardMonitor``: training scalars into TensorBoard event files.

A thin adapter: its options are :class:`~mindformers_tbplugin.session.tensorboard_options.TensorBoardOptions`
(what ``mftb validate`` checks), and a training's work is a
:class:`~mindformers_tbplugin.session.monitor_session.MonitorSession`, opened at train begin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindformers_tbplugin.framework.trainers import MonitorCallback, StepEnd, TrainStart
from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.pipeline.metrics import MetricKind
from mindformers_tbplugin.pipeline.run import Run
from mindformers_tbplugin.session.monitor_session import MonitorSession
from mindformers_tbplugin.session.tensorboard_options import TensorBoardOptions


class TensorBoardMonitor(MonitorCallback):
    """Write training metrics to TensorBoard: loss, lr, grad norm, loss scale, throughput, memory.

    Its options (the YAML entry's keys) are TensorBoardOptions': docs/options.md lists them.
    """

    OPTIONS = TensorBoardOptions  # the schema of the entry (schema.py reads it)
    check_cross_fields = TensorBoardOptions.check_cross_fields

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = TensorBoardOptions.of(options, type(self).__name__)  # fails fast on a bad entry
        self.log_root = self.options.log_root  # against the working directory now, as documented
        self._archive = self.options.archive_root
        self._baseline = self.options.baseline_path  # against the working directory now, as its check
        self.session: MonitorSession | None = None
        self._warn_once = WarnOnce()

    @property
    def run_dir(self) -> Path | None:
        """The training's main run folder (every rank agrees on it), once training began."""
        return self.session.run_dir if self.session is not None else None

    @property
    def resumed_from(self) -> int | None:
        return self.session.resumed_from if self.session is not None else None

    # -- training events (either trainer) ---------------------------------------------------------
    def train_started(self, start: TrainStart) -> None:
        try:
            self.session = MonitorSession(
                self.options, (self.log_root, self._archive, self._baseline), start, self.step_of
            )
        except Exception as exc:  # monitoring never stops training: this monitor stays idle
            self._warn_once("begin", f"TensorBoardMonitor: {exc!r} at train begin; training continues unmonitored")
            return
        self.session.run.monitor = self  # log_scalars and log_text write here

    def step_began(self, step: int) -> None:
        session = self.session
        if session is not None and step >= session.next_begin:  # most steps: nothing to do at their begin
            session.guard("step_begin", session.step_began, step)

    def step_ended(self, step: StepEnd) -> None:
        session = self.session
        if session is not None and session.router is not None:
            try:  # session.guard, inlined: this runs at every step
                session.step_ended(step)
            except Exception as exc:  # monitoring never stops training
                session.failed("step", session.step_ended, exc)

    def train_ended(self, failure: str | None) -> None:
        session = self.session
        if session is None:
            return
        if session.run.monitor is self:
            session.run.monitor = None
        if failure is None:
            session.finish(clean=True)
        else:
            session.finish(clean=False, status=f"failed at step {session.step}: {failure}")

    # -- log_scalars / log_text --------------------------------------------------------------------
    def log_custom(self, values: dict[str, float], step: int | None, kind: MetricKind) -> None:
        """Entry point of :func:`mindformers_tbplugin.log_scalars` while this monitor runs."""
        if self.session is not None and self.session.router is not None:
            self.session.log_values(values, step, kind)

    def log_custom_text(self, tag: str, text: str, step: int | None) -> None:
        """Entry point of :func:`mindformers_tbplugin.log_text` while this monitor runs."""
        if self.session is not None:
            self.session.log_text(tag, text, step)

    @property
    def run(self) -> Run | None:
        """The training's Run, once training began."""
        return self.session.run if self.session is not None else None
