"""The exit status of a process whose training an alert stopped: 3, whatever started it.

``mftb train`` returns it itself. Any other entry (a release's ``run_mindformer.py``, a user's script)
returns 0 once training ends normally, and a Python process can set its status after its main script
only by ending itself: :func:`exit_after_an_alert_stop` does that at interpreter exit. The package
registers it when it loads (through the ``.pth``, at interpreter start, before MindSpore registers its
own exit handlers), so it runs after every other exit handler: asynchronous checkpoint saves have
been waited for and files closed by then. It does nothing unless a training of this process was
stopped by an alert, nor when the process is ending on an uncaught exception (status 1 stays).

Under msrun a rank that exits non-zero makes msrun end the others at once, so no rank ends before every
rank has ended training: the line is printed and the ranks wait for each other first, at the start of
interpreter exit, while the collectives still work.

Standard library only at import: this module loads at every interpreter start.
"""

from __future__ import annotations

import atexit
import os
import sys

STOPPED_BY_ALERT = 3  # exit status: an AlertMonitor rule with action: stop ended training


class _Stopped:
    """This process's training an alert stopped, once that training has ended."""

    status: str | None = None  # e.g. "stopped by AlertMonitor (nonfinite on train/loss) at step 2"
    reported = False
    returned = False  # the entry returns STOPPED_BY_ALERT itself (mftb train): its status stands


_STOPPED = _Stopped()


def training_stopped_by_alert(status: str) -> None:
    """At the end of a training an alert stopped: the process will exit with STOPPED_BY_ALERT.

    Registers the report for the start of interpreter exit (exit handlers run last-registered first),
    for entries that do not call :func:`report_alert_stop` themselves."""
    first = _STOPPED.status is None
    _STOPPED.status = status
    if first:
        atexit.register(_report_at_exit)


def report_alert_stop(program: str) -> int:
    """For an entry that returns the status itself: 0, or STOPPED_BY_ALERT after printing
    ``<program>: <status>; exit status 3`` and waiting for every rank of the job to get here."""
    _STOPPED.returned = _STOPPED.status is not None
    return _report(program)


def _report(program: str) -> int:
    if _STOPPED.status is None:
        return 0
    if not _STOPPED.reported:  # once per process
        _STOPPED.reported = True
        print(f"{program}: {_STOPPED.status}; exit status {STOPPED_BY_ALERT}", file=sys.stderr, flush=True)
        if "mindspore" in sys.modules:  # without MindSpore there is no job to wait for
            from mindformers_tbplugin.framework.collectives import wait_for_every_rank

            wait_for_every_rank()
    return STOPPED_BY_ALERT


def _report_at_exit() -> None:
    if getattr(sys, "last_value", None) is None:  # an uncaught exception: the process failed, no report
        _report(os.path.basename(sys.argv[0]) or "python")


def exit_after_an_alert_stop() -> None:
    """The last exit handler: end the process with STOPPED_BY_ALERT if an alert stopped its training."""
    if _STOPPED.status is None or _STOPPED.returned or getattr(sys, "last_value", None) is not None:
        return
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):  # a closed or replaced stream
            stream.flush()
    os._exit(STOPPED_BY_ALERT)
