"""Registered MindFormers callbacks: one module per YAML ``type:``, wiring only."""

from mindformers_tbplugin.callbacks.tensorboard_monitor import TensorBoardMonitor

__all__ = ["TensorBoardMonitor"]
