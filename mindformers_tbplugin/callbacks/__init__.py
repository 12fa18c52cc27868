"""Registered MindFormers callbacks: one module per YAML ``type:``, wiring only."""

from mindformers_tbplugin.callbacks.alert_monitor import AlertMonitor
from mindformers_tbplugin.callbacks.histogram_monitor import HistogramMonitor
from mindformers_tbplugin.callbacks.tensorboard_monitor import TensorBoardMonitor

__all__ = ["AlertMonitor", "HistogramMonitor", "TensorBoardMonitor"]
