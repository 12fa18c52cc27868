"""The process's writers: one per run folder, all closed at interpreter exit and on SIGTERM.

Every producer in a process shares one writer per folder, since two writers in one folder make
TensorBoard mix their points.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mindformers_tbplugin.log import logger
from mindformers_tbplugin.tfevents.writer import RunWriter

# The one process-wide registry of the package (besides the current Run, pipeline/run.py): the
# writers of this process, the SIGTERM listeners, and whether the exit hooks are in place.
_registry: dict[Path, RunWriter] = {}
_registry_lock = threading.Lock()
_sigterm_listeners: list[Callable[[], None]] = []
_exit_hooks: list[bool] = []  # one entry once atexit and SIGTERM hooks are installed


def get_writer(run_dir: str | os.PathLike, flush_secs: float = 5.0, max_queue: int = 100_000) -> RunWriter:
    """The process's one open writer for ``run_dir``, created on first use."""
    key = Path(run_dir).resolve()
    with _registry_lock:
        writer = _registry.get(key)
        if writer is None or writer.closed:
            writer = RunWriter(key, flush_secs=flush_secs, max_queue=max_queue, on_close=_forget)
            _registry[key] = writer
        _install_exit_hooks()
        return writer


def _forget(writer: RunWriter) -> None:
    with _registry_lock:
        if _registry.get(writer.run_dir) is writer:
            del _registry[writer.run_dir]


def close_all(timeout: float = 30.0) -> None:
    """Close every open writer (all queued points reach the disk)."""
    with _registry_lock:
        writers = list(_registry.values())
    for writer in writers:
        writer.close(timeout=timeout)


def _install_exit_hooks() -> None:
    if _exit_hooks:
        return
    _exit_hooks.append(True)
    atexit.register(close_all)
    if threading.current_thread() is threading.main_thread():
        _chain_sigterm()


def on_sigterm(listener: Callable[[], None]) -> None:
    """Run ``listener`` (before the writers close) when SIGTERM arrives."""
    _sigterm_listeners.append(listener)


def remove_sigterm_listener(listener: Callable[[], None]) -> None:
    if listener in _sigterm_listeners:
        _sigterm_listeners.remove(listener)


def _chain_sigterm() -> None:
    previous = signal.getsignal(signal.SIGTERM)

    def handle_sigterm(signum: int, frame: Any) -> None:
        for listener in list(_sigterm_listeners):
            try:
                listener()
            except Exception:  # a listener must not prevent closing
                logger.exception("mindformers_tbplugin SIGTERM listener failed")
        close_all(timeout=10.0)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            # Die of SIGTERM as the process would have without us, so exit codes stay honest.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    with contextlib.suppress(ValueError, OSError):  # not the main thread of the main interpreter
        signal.signal(signal.SIGTERM, handle_sigterm)
