"""In-process publication of the values a TensorBoardMonitor writes to its main run.

Listeners (e.g. alert rules) see exactly what lands in TensorBoard, after cross-rank aggregation,
on the rank that writes the main run. ``publish`` runs on the training thread: listeners must be
cheap (microseconds) and must not raise; one that raises is removed with a warning.
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
