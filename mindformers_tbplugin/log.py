"""The plugin's logger. Inside a MindFormers process its records go to MindFormers' own logger,
so they appear in the same console and per-rank log files as the training's messages."""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

logger = logging.getLogger("mindformers_tbplugin")


class _ToMindFormersLogger(logging.Handler):
    def __init__(self, target: Any) -> None:
        super().__init__()
        self._target = target  # MindFormers' logger offers info/warning/error, not log()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            method = (
                "error"
                if record.levelno >= logging.ERROR
                else "warning"
                if record.levelno >= logging.WARNING
                else "info"
            )
            getattr(self._target, method)("[mftb] %s", record.getMessage())
        except Exception:  # logging must never raise into training
            self.handleError(record)


def route_to(target: Any) -> None:
    """Send our records through ``target``, MindFormers' logger (``mindformers.tools.logger.logger``).
    Idempotent."""
    if any(isinstance(h, _ToMindFormersLogger) for h in logger.handlers):
        return
    logger.addHandler(_ToMindFormersLogger(target))
    logger.setLevel(logging.INFO)
    logger.propagate = False


class WarnOnce:
    """Warn at most once per key: a failure that repeats every step is said once, not a thousand times."""

    def __init__(self, note: str = "") -> None:
        self._said: set[str] = set()
        self._note = note  # appended to each message, e.g. that repeats go unreported

    def __call__(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            logger.warning(message + self._note)


def mask_url(url: str) -> str:
    """The URL as it may appear in logs: credentials, path and query (where tokens hide) masked."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
    except ValueError:
        return "<invalid url>"
    user = "***@" if parts.username or parts.password else ""
    rest = "/***" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{user}{host}{rest}"
