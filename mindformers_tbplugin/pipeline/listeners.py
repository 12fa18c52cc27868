"""In-process publication of the values a TensorBoardMonitor writes to its main run.

Listeners (e.g. alert rules) see exactly what lands in TensorBoard, after cross-rank aggregation,
on the rank that writes the main run. ``publish`` runs on the training thread: listeners must be
cheap (microseconds) and must not raise; one that raises is removed with a warning.

The other direction: a job-wide stop. A request made on one rank (an alert's ``action: stop``) rides
in the next cross-rank aggregation, so that every rank stops at the same step; stopping one rank
alone would leave the others waiting in their next collective.
"""

from __future__ import annotations

from collections.abc import Callable

from mindformers_tbplugin.log import logger

Listener = Callable[[int, dict[str, float]], None]

_listeners: list[Listener] = []


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


# -- job-wide stop --------------------------------------------------------------------------------
_stop_carriers = 0  # TensorBoardMonitors of this process that aggregate across ranks
_stop_requested = False


def add_stop_carrier() -> None:
    global _stop_carriers
    _stop_carriers += 1


def remove_stop_carrier() -> None:
    global _stop_carriers
    _stop_carriers = max(_stop_carriers - 1, 0)


def request_job_stop() -> bool:
    """Ask every rank to stop at the next aggregation; False when nothing carries it across ranks."""
    global _stop_requested
    if not _stop_carriers:
        return False
    _stop_requested = True
    return True


def take_stop_request() -> bool:
    """Whether a stop was requested since the last call (the aggregation that carries it)."""
    global _stop_requested
    requested, _stop_requested = _stop_requested, False
    return requested
