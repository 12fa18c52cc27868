"""The logged steps whose values are read but not yet routed, and who routes them.

At a logged step the training thread reads the step's outputs (the device reads cannot move) and
queues the rest: tags, per-layer grouping, the x-axis twins, the aggregation's buffers. The writer
thread routes the queue once a second, in one batch, before it encodes: a batch runs with the
interpreter's code and data in the CPU caches, where the same work at a step end runs with them
evicted and costs several times more (BENCHMARKS.md, on/off section). The training thread routes
the queue itself whenever a step needs it at once: a cross-rank aggregation (every rank's collective
at the same step), a listener (AlertMonitor's rules, whose stop must come at the step that fired it),
the end of training.

One lock serialises routing, so the router only ever runs on one thread at a time and sees the steps
in order.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

Failed = Callable[[str, Any, Exception], None]  # (key, function, exception): the session's warn-once


class StepBacklog:
    def __init__(self, failed: Failed) -> None:
        self._queue: deque[tuple[Callable[..., None], tuple]] = deque()
        self._lock = threading.Lock()
        self._owner: int | None = None  # the thread routing now
        self._failed = failed

    def add(self, route: Callable[..., None], *args: Any) -> None:
        """Queue ``route(*args)`` (training thread)."""
        self._queue.append((route, args))

    def __len__(self) -> int:
        return len(self._queue)

    def route(self, wait: bool = True) -> bool:
        """Run what is queued, in order; True when anything ran. ``wait=False`` (the writer thread):
        return at once if another thread is routing, which empties the queue anyway. A thread that is
        routing already (a signal handler interrupting it) returns at once: the routing it interrupted
        must not be entered again."""
        if self._owner == threading.get_ident() or not self._lock.acquire(blocking=wait):
            return False
        self._owner = threading.get_ident()
        try:
            queue, ran = self._queue, False
            while queue:
                route, args = queue.popleft()
                ran = True
                try:
                    route(*args)
                except Exception as exc:  # monitoring never stops training
                    self._failed("route", route, exc)
            return ran
        finally:
            self._owner = None
            self._lock.release()
