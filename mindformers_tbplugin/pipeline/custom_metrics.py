"""Custom metrics: functions named in YAML (``extra_metrics``) and the public ``log_scalars`` API.

Both go through the running TensorBoardMonitor (the current Run's monitor), so custom values land in
the same run, on the same steps, and are combined across ranks according to their declared
:class:`MetricKind`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.pipeline.metrics import MetricKind
from mindformers_tbplugin.pipeline.run import RunningMonitor, current_run

MetricFn = Callable[[Any], dict[str, float]]


def metric(kind: MetricKind | str = MetricKind.MODEL) -> Callable[[MetricFn], MetricFn]:
    """Declare the kind of an ``extra_metrics`` function (default: ``model``, written once).

    >>> @metric(kind="data")
    ... def padding_ratio(cb_params):
    ...     return {"data/padding_ratio": 0.1}
    """
    resolved = MetricKind(kind)

    def mark(fn: MetricFn) -> MetricFn:
        fn.mftb_kind = resolved  # type: ignore[attr-defined]
        return fn

    return mark


@dataclass(frozen=True)
class ExtraMetric:
    reference: str
    fn: MetricFn
    kind: MetricKind


def resolve_extra_metric(reference: str) -> ExtraMetric:
    """Import ``"package.module:function"``. Raises ValueError with a readable reason."""
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{reference!r} is not of the form 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot import module {module_name!r} ({type(exc).__name__}: {exc})") from exc
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise ValueError(f"{reference!r} is not callable")
    return ExtraMetric(reference, fn, MetricKind(getattr(fn, "mftb_kind", MetricKind.MODEL)))


_warn_once = WarnOnce()


def _running_monitor() -> RunningMonitor | None:
    run = current_run()
    return run.monitor if run is not None else None


def active_run_dir() -> Path | None:
    """Main run folder of the TensorBoardMonitor running in this process, looked up at call time
    (None outside a monitored training). Only the writing rank (``Topology.is_writer``) may write
    there; it gets the monitor's own writer with ``registry.get_writer(active_run_dir())``."""
    monitor = _running_monitor()
    run_dir = getattr(monitor, "run_dir", None)
    return Path(run_dir) if run_dir is not None else None


def log_scalars(values: dict[str, float], step: int | None = None, kind: MetricKind | str = MetricKind.MODEL) -> None:
    """Write ``{tag: value}`` into the running TensorBoardMonitor's run.

    ``step`` defaults to the current training step. ``kind`` says how ranks combine the values:
    ``"data"`` (mean over data-parallel ranks), ``"model"`` (written once) or ``"system"`` (per rank).
    Outside a monitored training this warns once and drops the values; it never raises for that.
    """
    monitor = _running_monitor()
    if monitor is None:
        _warn_once("no-monitor", "log_scalars: no TensorBoardMonitor is running in this process; values dropped.")
        return
    monitor.log_custom(values, step, MetricKind(kind))


def log_text(tag: str, text: str, step: int | None = None) -> None:
    """Write a text entry (TensorBoard's Text dashboard) into the running monitor's main run.

    Written by the rank that writes the main run; other ranks' calls are ignored. Outside a
    monitored training this warns once and drops the text.
    """
    monitor = _running_monitor()
    if monitor is None:
        _warn_once("no-monitor-text", "log_text: no TensorBoardMonitor is running in this process; text dropped.")
        return
    monitor.log_custom_text(tag, text, step)
