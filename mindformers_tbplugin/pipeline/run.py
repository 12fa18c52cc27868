"""The Run: one training's shared state, reached through one accessor.

The callbacks of a training are built from YAML independently (TensorBoardMonitor, AlertMonitor, ...)
and user code calls ``log_scalars`` from anywhere; what they share lives here, per training:

* the main run's name, and the monitor that writes it (``log_scalars`` / ``log_text`` go there);
* the listeners of the values written to the main run (alert rules see exactly what TensorBoard gets,
  after cross-rank aggregation, on the writing rank), and of the MoE loads behind the ``moe/`` values;
* the job-wide stop (:class:`JobStop`).

Each callback gets its training's Run from :func:`training_run` at train begin, by the training's
identity (the callback parameters object all callbacks of a training share); user code finds it with
:func:`current_run`. The last training's Run stays current after it ends (``mftb train`` reads how it
stopped). Listeners run on the training thread: they must be cheap and must not raise; one that raises
is removed with a warning.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline.metrics import MetricKind

Listener = Callable[[int, dict[str, float]], None]
RANK_LOSS_STEPS = 64  # logged steps whose per-rank losses an alert's incident can look back on
# (step, each expert's load over its layer's mean (layers x experts), the LoadStatistics that named them)
ExpertLoadListener = Callable[[int, Any, Any], None]


class RunningMonitor(Protocol):
    """What ``log_scalars``/``log_text`` need of the TensorBoardMonitor that receives them."""

    run_dir: Path | None

    def log_custom(self, values: dict[str, float], step: int | None, kind: MetricKind) -> None: ...

    def log_custom_text(self, tag: str, text: str, step: int | None) -> None: ...


@dataclass(frozen=True)
class AlertStop:
    """A stop an alert's ``action: stop`` asked for and training carried out."""

    cause: str  # "<rule> on <tag>"; ranks that learn of the stop from the aggregation: "an alert on rank <r>"
    alert_step: int | None = None  # the step the alert fired at, where known
    stopped_at: int | None = None  # the last step trained, once training ended

    def status(self) -> str:
        """E.g. ``stopped by AlertMonitor (nonfinite on train/loss) at step 2`` (``meta/status``)."""
        fired = f" at step {self.alert_step}" if self.alert_step not in (None, self.stopped_at) else ""
        last = "" if self.stopped_at is None else f" at step {self.stopped_at}"
        return f"stopped by AlertMonitor ({self.cause}{fired}){last}"


class JobStop:
    """A job-wide stop. A request made on one rank (an alert's ``action: stop``) rides in the next
    cross-rank aggregation, so that every rank stops at the same step; stopping one rank alone would
    leave the others waiting in their next collective. What a training stopped that way records
    (``meta/status``, ``mftb train``'s exit status) is :attr:`carried_out`."""

    def __init__(self) -> None:
        self.carriers = 0  # routers of this training that aggregate across ranks
        self._pending = False  # requested since the last aggregation
        self.requested: AlertStop | None = None  # what this process asked the job to stop for
        self.carried_out: AlertStop | None = None  # the alert stop this training carries out

    def request(self, cause: str = "", step: int | None = None) -> bool:
        """Ask every rank to stop at the next aggregation; False when nothing carries it across ranks."""
        if not self.carriers:
            return False
        self._pending = True
        self.requested = self.requested or AlertStop(cause, step)
        return True

    def take_request(self) -> bool:
        """Whether a stop was requested since the last call (the aggregation that carries it)."""
        pending, self._pending = self._pending, False
        return pending

    def alone(self, cause: str, step: int) -> None:
        """A single process stops training itself for an alert (no other rank to tell)."""
        self.carried_out = self.carried_out or AlertStop(cause, step)

    def agreed(self, writer_rank: int) -> None:
        """Every rank, when an aggregation carried a stop request: training stops for the requester's alert."""
        self.carried_out = self.carried_out or self.requested or AlertStop(f"an alert on rank {writer_rank}")

    def finish(self, step: int) -> AlertStop | None:
        """At the clean end of training: the alert stop it carried out, if any, with its last step."""
        if self.carried_out is not None and self.carried_out.stopped_at is None:
            self.carried_out = replace(self.carried_out, stopped_at=step)
        return self.carried_out


class Run:
    def __init__(self, key: object = None) -> None:
        self.key = key  # the training's identity
        self.name = ""  # the main run's folder, relative to its log_dir (as ``mftb watch`` names runs)
        self.monitor: RunningMonitor | None = None
        self.gradient_groups = False  # the monitor writes per-layer gradient norms (grad_norm/<group>)
        self.stop = JobStop()
        self.alerts: list[tuple[str, int, bool]] = []  # (rule, step, carries an incident) of each alert reported
        self._listeners: list[Listener] = []
        self._expert_load_listeners: list[ExpertLoadListener] = []
        self._settlers: list[Callable[[], None]] = []
        self._rank_losses: deque[tuple[int, Any]] = deque(maxlen=RANK_LOSS_STEPS)

    def note_alert(self, rule: str, step: int, incident: bool) -> None:
        """An alert reported (for the run's status record, read on the writer thread: append only)."""
        self.alerts.append((rule, step, incident))

    # -- the values written to the main run ---------------------------------------------------------
    def subscribe(self, listener: Listener) -> None:
        if listener not in self._listeners:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    @property
    def listening(self) -> bool:
        """Whether anyone listens to the written values or to the expert loads."""
        return bool(self._listeners or self._expert_load_listeners)

    def on_settle(self, settle: Callable[[], None]) -> None:
        """``settle()``: publish what is still being computed off the training thread (a publisher's)."""
        self._settlers.append(settle)

    def settle(self) -> None:
        """At the end of training, before a listener leaves: every value written so far is published."""
        for settle in tuple(self._settlers):
            settle()

    def publish(self, step: int, values: dict[str, float]) -> None:
        """Hand one step's written values to every listener. ``values`` must not be mutated."""
        if self._listeners:  # none unless an AlertMonitor or an extra listens: this runs at every logged step
            _call_each(self._listeners, step, values)

    # -- each data-parallel rank's loss at a step (the aggregation's), for incidents ---------------------
    def keep_rank_losses(self, by_step: list[tuple[int, Any]]) -> None:
        """``(step, array of each rank's train/loss, -inf: none)`` of the last aggregation (references)."""
        self._rank_losses.extend(by_step)

    def rank_losses_at(self, step: int) -> Any | None:
        return next((losses for kept, losses in reversed(self._rank_losses) if kept == step), None)

    def subscribe_expert_loads(self, listener: ExpertLoadListener) -> None:
        if listener not in self._expert_load_listeners:
            self._expert_load_listeners.append(listener)

    def unsubscribe_expert_loads(self, listener: ExpertLoadListener) -> None:
        if listener in self._expert_load_listeners:
            self._expert_load_listeners.remove(listener)

    @property
    def wants_expert_loads(self) -> bool:
        """Whether anyone listens (else a publisher can skip building the loads)."""
        return bool(self._expert_load_listeners)

    def publish_expert_loads(self, step: int, relative: Any, statistics: Any) -> None:
        """The MoE layers' loads behind the ``moe/*`` values of ``step``, published just before them."""
        _call_each(self._expert_load_listeners, step, relative, statistics)


def _call_each(listeners: list, *arguments: Any) -> None:
    for listener in tuple(listeners):
        try:
            listener(*arguments)
        except Exception as exc:  # a listener must never stop training
            listeners.remove(listener)
            logger.warning("listener %r failed (%r) and was removed", listener, exc)


class _Current:
    """The process's current training (one at a time in a MindFormers process)."""

    run: Run | None = None


_CURRENT = _Current()


def training_run(key: object) -> Run:
    """The Run of the training ``key`` identifies, made at its first callback's train begin; ``None``: a
    Run of its own (a caller that shares nothing)."""
    run = _CURRENT.run
    if key is None or run is None or run.key is not key:
        run = _CURRENT.run = Run(key)
    return run


def current_run() -> Run | None:
    """The running (or last) training's Run, None before any training began in this process."""
    return _CURRENT.run
