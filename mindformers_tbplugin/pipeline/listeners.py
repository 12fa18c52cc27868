"""In-process publication of the values a TensorBoardMonitor writes to its main run.

Listeners (e.g. alert rules) see exactly what lands in TensorBoard, after cross-rank aggregation,
on the rank that writes the main run. ``publish`` runs on the training thread: listeners must be
cheap (microseconds) and must not raise; one that raises is removed with a warning.

The other direction: a job-wide stop. A request made on one rank (an alert's ``action: stop``) rides
in the next cross-rank aggregation, so that every rank stops at the same step; stopping one rank
alone would leave the others waiting in their next collective. What a training stopped that way
records (``meta/status``, ``mftb train``'s exit status) comes from :func:`alert_stop`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from mindformers_tbplugin.log import logger

Listener = Callable[[int, dict[str, float]], None]
# (step, each expert's load over its layer's mean (layers x experts), the LoadStatistics that named them)
ExpertLoadListener = Callable[[int, Any, Any], None]

_listeners: list[Listener] = []
_expert_load_listeners: list[ExpertLoadListener] = []
_main_run = ""  # the main run's folder, relative to its log_dir (as ``mftb watch`` names runs)


def set_main_run(name: str) -> None:
    global _main_run
    _main_run = name


def main_run() -> str:
    """The run the published values are written to ("" before a TensorBoardMonitor opened one)."""
    return _main_run


def subscribe(listener: Listener) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def unsubscribe(listener: Listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def publish(step: int, values: dict[str, float]) -> None:
    """Hand one step's written values to every listener. ``values`` must not be mutated."""
    for listener in tuple(_listeners):
        try:
            listener(step, values)
        except Exception as exc:  # a listener must never stop training
            unsubscribe(listener)
            logger.warning("listener %r failed (%r) and was removed", listener, exc)


def subscribe_expert_loads(listener: ExpertLoadListener) -> None:
    if listener not in _expert_load_listeners:
        _expert_load_listeners.append(listener)


def unsubscribe_expert_loads(listener: ExpertLoadListener) -> None:
    if listener in _expert_load_listeners:
        _expert_load_listeners.remove(listener)


def publish_expert_loads(step: int, relative: Any, statistics: Any) -> None:
    """The MoE layers' loads behind the ``moe/*`` values of ``step``, published just before them."""
    for listener in tuple(_expert_load_listeners):
        try:
            listener(step, relative, statistics)
        except Exception as exc:  # a listener must never stop training
            unsubscribe_expert_loads(listener)
            logger.warning("listener %r failed (%r) and was removed", listener, exc)


# -- job-wide stop --------------------------------------------------------------------------------
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


_stop_carriers = 0  # TensorBoardMonitors of this process that aggregate across ranks
_stop_requested = False
_requested: AlertStop | None = None  # what this process asked the job to stop for
_carried_out: AlertStop | None = None  # the alert stop this process's training carries out


def add_stop_carrier() -> None:
    global _stop_carriers
    _stop_carriers += 1


def remove_stop_carrier() -> None:
    global _stop_carriers
    _stop_carriers = max(_stop_carriers - 1, 0)


def request_job_stop(cause: str = "", step: int | None = None) -> bool:
    """Ask every rank to stop at the next aggregation; False when nothing carries it across ranks."""
    global _stop_requested, _requested
    if not _stop_carriers:
        return False
    _stop_requested = True
    _requested = _requested or AlertStop(cause, step)
    return True


def take_stop_request() -> bool:
    """Whether a stop was requested since the last call (the aggregation that carries it)."""
    global _stop_requested
    requested, _stop_requested = _stop_requested, False
    return requested


def stop_alone(cause: str, step: int) -> None:
    """A single process stops training itself for an alert (no other rank to tell)."""
    global _carried_out
    _carried_out = _carried_out or AlertStop(cause, step)


def stop_agreed(writer_rank: int) -> None:
    """Every rank, when an aggregation carried a stop request: training stops for the requester's alert."""
    global _carried_out
    _carried_out = _carried_out or _requested or AlertStop(f"an alert on rank {writer_rank}")


def finish_alert_stop(step: int) -> AlertStop | None:
    """At the clean end of training: the alert stop it carried out, if any, with its last step."""
    global _carried_out
    if _carried_out is not None and _carried_out.stopped_at is None:
        _carried_out = replace(_carried_out, stopped_at=step)
    return _carried_out


def alert_stop() -> AlertStop | None:
    """The alert stop this process's last training carried out (``mftb train`` exits 3 for it)."""
    return _carried_out


def reset_job_stop() -> None:
    """At train begin: nothing requested or carried out yet."""
    global _stop_requested, _requested, _carried_out
    _stop_requested, _requested, _carried_out = False, None, None
