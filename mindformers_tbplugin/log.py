"""The plugin's logger. Inside a MindFormers process its records go to MindFormers' own logger,
so they appear in the same console and per-rank log files as the training's messages."""

from __future__ import annotations

import logging

logger = logging.getLogger("mindformers_tbplugin")


class _ToMindFormersLogger(logging.Handler):
    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self._target = target

    def emit(self, record: logging.LogRecord) -> None:
        self._target.log(record.levelno, "[mftb] %s", record.getMessage())


def route_to_mindformers() -> None:
    """Send our records through ``mindformers.tools.logger.logger``. Idempotent."""
    if any(isinstance(h, _ToMindFormersLogger) for h in logger.handlers):
        return
    from mindformers.tools.logger import logger as mindformers_logger

    logger.addHandler(_ToMindFormersLogger(mindformers_logger))
    logger.setLevel(logging.INFO)
    logger.propagate = False
