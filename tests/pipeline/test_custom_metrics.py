"""Custom metrics (pipeline/custom_metrics.py): ``@metric`` declaring a function's kind, the
``extra_metrics`` references resolved from "package.module:function" (with the reason when they cannot
be), and ``log_scalars`` / ``log_text`` / ``active_run_dir`` reaching the monitor of the current Run, or
warning once and dropping the values outside a monitored training."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import plugin_log

from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.pipeline import custom_metrics
from mindformers_tbplugin.pipeline import run as run_module
from mindformers_tbplugin.pipeline.custom_metrics import (
    active_run_dir,
    log_scalars,
    log_text,
    metric,
    resolve_extra_metric,
)
from mindformers_tbplugin.pipeline.metrics import MetricKind
from mindformers_tbplugin.pipeline.run import training_run

USER_MODULE = "mftb_test_user_metrics"


# -- @metric and extra_metrics references -----------------------------------------------------------------
def test_metric_declares_the_kind_on_the_function_itself() -> None:
    def padding_ratio(cb_params: object) -> dict[str, float]:
        return {"data/padding_ratio": 0.1}

    assert metric(kind="data")(padding_ratio) is padding_ratio
    assert padding_ratio.mftb_kind is MetricKind.DATA  # type: ignore[attr-defined]
    assert metric()(padding_ratio).mftb_kind is MetricKind.MODEL  # type: ignore[attr-defined]


def test_an_unknown_kind_is_refused_when_the_function_is_declared() -> None:
    with pytest.raises(ValueError, match="'batch' is not a valid MetricKind"):
        metric(kind="batch")


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A user's module of metric functions on the import path, as a training's PYTHONPATH holds it."""
    (tmp_path / f"{USER_MODULE}.py").write_text(
        textwrap.dedent(
            """
            from mindformers_tbplugin.pipeline.custom_metrics import metric

            @metric(kind="system")
            def host_load(cb_params):
                return {"system/load": 1.0}

            def tokens(cb_params):
                return {"data/tokens": 2.0}

            class Holder:
                @staticmethod
                def nested(cb_params):
                    return {"user/nested": 3.0}

            THRESHOLD = 3
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "mftb_test_broken_metrics.py").write_text("raise RuntimeError('no GPU here')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield USER_MODULE
    for name in (USER_MODULE, "mftb_test_broken_metrics"):
        sys.modules.pop(name, None)


def test_a_reference_resolves_to_the_function_and_its_declared_kind(user_module: str) -> None:
    resolved = resolve_extra_metric(f"{user_module}:host_load")
    assert (resolved.reference, resolved.kind) == (f"{user_module}:host_load", MetricKind.SYSTEM)
    assert resolved.fn(None) == {"system/load": 1.0}
    assert resolve_extra_metric(f"{user_module}:tokens").kind is MetricKind.MODEL  # undeclared: written once
    assert resolve_extra_metric(f"{user_module}:Holder.nested").fn(None) == {"user/nested": 3.0}


@pytest.mark.parametrize(
    ("reference", "reason"),
    [
        ("mftb_test_user_metrics.host_load", "'mftb_test_user_metrics.host_load' is not of the form"),
        (":host_load", "':host_load' is not of the form 'package.module:function'"),
        ("mftb_test_user_metrics:", "is not of the form"),
        (
            "mftb_test_no_such_module:f",
            "cannot import module 'mftb_test_no_such_module' "
            "(ModuleNotFoundError: No module named 'mftb_test_no_such_module')",
        ),
        ("mftb_test_broken_metrics:f", "cannot import module 'mftb_test_broken_metrics' (RuntimeError: no GPU here)"),
        ("mftb_test_user_metrics:missing", "module 'mftb_test_user_metrics' has no attribute 'missing'"),
        ("mftb_test_user_metrics:Holder.missing", "has no attribute 'Holder.missing'"),
        ("mftb_test_user_metrics:THRESHOLD", "'mftb_test_user_metrics:THRESHOLD' is not callable"),
    ],
)
def test_a_reference_that_cannot_be_used_says_why(user_module: str, reference: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        resolve_extra_metric(reference)
    assert reason in str(caught.value)


# -- log_scalars, log_text, active_run_dir ---------------------------------------------------------------
class RecordingMonitor:
    """What log_scalars and log_text need of a TensorBoardMonitor (run.RunningMonitor), recorded."""

    def __init__(self, run_dir: Path | None) -> None:
        self.run_dir = run_dir
        self.scalars: list[tuple[dict[str, float], int | None, MetricKind]] = []
        self.texts: list[tuple[str, str, int | None]] = []

    def log_custom(self, values: dict[str, float], step: int | None, kind: MetricKind) -> None:
        self.scalars.append((values, step, kind))

    def log_custom_text(self, tag: str, text: str, step: int | None) -> None:
        self.texts.append((tag, text, step))


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """No training in this process yet, and no warning given yet (both put back afterwards)."""
    monkeypatch.setattr(run_module._CURRENT, "run", None)
    monkeypatch.setattr(custom_metrics, "_warn_once", WarnOnce())


def test_log_scalars_reaches_the_current_runs_monitor_with_its_kind(no_training: None, tmp_path: Path) -> None:
    monitor = RecordingMonitor(tmp_path)
    training_run(object()).monitor = monitor
    log_scalars({"user/x": 1.5}, step=5, kind="data")
    log_scalars({"user/y": 2.0})
    assert monitor.scalars == [({"user/x": 1.5}, 5, MetricKind.DATA), ({"user/y": 2.0}, None, MetricKind.MODEL)]
    with pytest.raises(ValueError):
        log_scalars({"user/z": 1.0}, kind="batch")
    assert len(monitor.scalars) == 2


def test_log_text_reaches_the_current_runs_monitor(no_training: None) -> None:
    monitor = RecordingMonitor(None)
    training_run(object()).monitor = monitor
    log_text("notes/data", "switched to the second shard", step=12)
    assert monitor.texts == [("notes/data", "switched to the second shard", 12)]


def test_the_active_run_dir_is_the_monitors_folder_looked_up_at_call_time(no_training: None, tmp_path: Path) -> None:
    assert active_run_dir() is None  # no training
    run = training_run(object())
    assert active_run_dir() is None  # a training without TensorBoardMonitor
    run.monitor = RecordingMonitor(None)
    assert active_run_dir() is None  # a monitor whose run folder is not open yet
    run.monitor = RecordingMonitor(str(tmp_path / "run_1"))  # type: ignore[arg-type]
    assert active_run_dir() == tmp_path / "run_1"


def test_outside_a_monitored_training_values_are_dropped_with_one_warning_each(no_training: None) -> None:
    with plugin_log() as messages:
        log_scalars({"user/x": 1.0})
        log_scalars({"user/x": 2.0})
        training_run(object())  # a training with an AlertMonitor only: still no monitor
        log_text("notes/a", "text")
        log_text("notes/a", "text")
    assert messages == [
        "log_scalars: no TensorBoardMonitor is running in this process; values dropped.",
        "log_text: no TensorBoardMonitor is running in this process; text dropped.",
    ]
