"""How alerts leave the process: the ``Sink`` interface, and for the chat and mail sinks one delivery
thread each with a bounded queue, retries with backoff, storm folding and credentials from the environment.

A ``MessageSink``'s ``emit`` runs on the training thread and only takes a lock and appends to a queue:
a slow, hanging or failing server never blocks training. When a rule keeps firing, its first alert
(per run and rule) goes out at once and the next ones within ``fold_seconds`` are folded into one
summary message (how many, the step range, the last value), sent when that window closes. A message
that still fails after its retries is dropped; the first such failure of a sink is logged, once.
"""

from __future__ import annotations

import abc
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.log import WarnOnce, logger

QUEUE_LIMIT = 100  # messages waiting per sink; beyond it new ones are dropped (one warning)
FOLD_SECONDS = 600.0  # a rule's further firings within this window become one summary message
ATTEMPTS = 4  # tries per message
BACKOFF_S = 2.0  # wait before the second try; doubled before each further one


class Sink(abc.ABC):
    """Receives alerts. ``emit`` must not raise and must return quickly."""

    @abc.abstractmethod
    def emit(self, alert: Alert) -> None: ...

    label = "sink"
    unavailable: str | None = None  # why this sink cannot deliver (a secret variable unset), said at start

    def close(self, timeout: float = 5.0) -> None:  # noqa: B027 - most sinks hold nothing
        """Deliver what is pending (waiting at most ``timeout`` seconds)."""

    def describe(self) -> str:
        """Where the alerts go, for the line AlertMonitor logs at start (secrets masked)."""
        return self.label


class DeliveryError(Exception):
    """A message was not accepted. ``retry``: worth trying again (network, 5xx, 429); else permanent."""

    def __init__(self, reason: str, retry: bool) -> None:
        super().__init__(reason)
        self.retry = retry


@dataclass
class Fold:
    """A rule's firings folded within one window: how many, the first and last, their tags (bounded)."""

    until: float  # the window's end (monotonic clock)
    count: int = 0
    first: Alert | None = None
    last: Alert | None = None
    tags: set[str] = field(default_factory=set)

    def add(self, alert: Alert) -> None:
        self.count += 1
        self.first = self.first or alert
        self.last = alert
        self.tags.add(alert.tag)


@dataclass(frozen=True)
class Summary:
    """Several firings of one rule on one run, sent as one message."""

    run: str
    rule: str
    count: int
    first: Alert
    last: Alert
    tags: tuple[str, ...]
    seconds: float


def secret(env: str | None, file: str | None) -> tuple[str | None, str | None]:
    """``(value, None)`` from the variable ``env`` or the file ``file``, or ``(None, why not)``. The value
    itself never appears in a message."""
    if env:
        value = os.environ.get(env, "")
        return (value, None) if value else (None, f"environment variable {env} is not set")
    if file:
        try:
            value = Path(file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            return None, f"cannot read secret file {file}: {exc.strerror or exc}"
        return (value, None) if value else (None, f"secret file {file} is empty")
    return None, None


class MessageSink(Sink):
    """A sink that sends one message per alert (or per folded storm) from its own thread."""

    def __init__(
        self,
        fold_seconds: float = FOLD_SECONDS,
        attempts: int = ATTEMPTS,
        backoff: float = BACKOFF_S,
        queue_limit: int = QUEUE_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fold_seconds = fold_seconds
        self.attempts = attempts
        self.backoff = backoff
        self.queue_limit = queue_limit
        self._clock = clock
        self._queue: deque[Alert | Summary] = deque()
        self._folds: dict[tuple[str, str], Fold] = {}
        self._wake = threading.Condition()
        self._closing = threading.Event()
        self.thread: threading.Thread | None = None
        self.sent = 0  # messages accepted by the server
        self.dropped = 0  # messages dropped because the queue was full
        self._warn_once = WarnOnce()

    # -- the training thread ----------------------------------------------------------------------
    def emit(self, alert: Alert) -> None:
        key = (alert.run, alert.rule)
        with self._wake:
            fold = self._folds.get(key)
            if fold is not None and self._clock() < fold.until:
                fold.add(alert)  # folded: the summary goes out when the window closes
                return
            self._folds[key] = Fold(self._clock() + self.fold_seconds)
            self._put(alert)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name=f"mftb-alerts-{self.label}", daemon=True)
                self.thread.start()
            self._wake.notify()

    def pending(self) -> int:
        """Messages queued and not yet taken by the delivery thread."""
        with self._wake:
            return len(self._queue)

    def close(self, timeout: float = 5.0) -> None:
        with self._wake:
            self._closing.set()
            self._wake.notify()
        if self.thread is None:
            return
        self.thread.join(timeout)
        if self.thread.is_alive():
            left = self.pending() + sum(fold.count > 0 for fold in self._folds.values())
            logger.warning(
                "alert %s: still sending after %g s; %d more message(s) not sent", self.describe(), timeout, left
            )

    def _put(self, item: Alert | Summary) -> None:
        """Under the lock."""
        if len(self._queue) >= self.queue_limit:
            self.dropped += 1
            self._warn_once(
                "full",
                f"alert {self.describe()}: {self.queue_limit} messages waiting, new alerts are dropped "
                "(the server is slow or unreachable; further drops are not reported)",
            )
            return
        self._queue.append(item)

    # -- the delivery thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                item = self._next()
            if item is None:
                return
            self._deliver(item)

    def _next(self) -> Alert | Summary | None:
        """The next message to send, waiting for one (under the lock); None once closed and empty."""
        while True:
            now = self._clock()
            closing = self._closing.is_set()
            for key, fold in list(self._folds.items()):
                if closing or now >= fold.until:
                    if fold.first and fold.last:  # a storm: its summary, and a new window for what follows
                        tags = tuple(sorted(fold.tags))
                        self._put(Summary(*key, fold.count, fold.first, fold.last, tags, self.fold_seconds))
                        self._folds[key] = Fold(now + self.fold_seconds)
                    else:
                        del self._folds[key]
            if self._queue:
                return self._queue.popleft()
            if closing:
                return None
            ends = [fold.until for fold in self._folds.values()]
            self._wake.wait(None if not ends else max(0.0, min(ends) - now))

    def _deliver(self, item: Alert | Summary) -> None:
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                self.send(item)
            except DeliveryError as exc:
                if exc.retry and attempt < self.attempts:
                    self._closing.wait(delay)  # a close cuts the wait short, not the tries
                    delay *= 2
                    continue
                tries = f" after {attempt} tries" if attempt > 1 else ""
                self._report(f"alert {self.describe()} failed{tries}: {exc}")
            except Exception as exc:  # a sink must never take anything else down
                self._report(f"alert {self.describe()} failed: {exc!r}")
            else:
                self.sent += 1
            return

    def _report(self, message: str) -> None:
        self._warn_once("failed", message + " (this sink's further failures are not reported)")

    @abc.abstractmethod
    def send(self, item: Alert | Summary) -> None:
        """Send one message (on the delivery thread); raise DeliveryError when it is not accepted."""
