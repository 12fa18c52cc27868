"""Registered MindFormers callbacks: one module per YAML ``type:``, wiring only."""

from mindformers_tbplugin.callbacks.alert_monitor import AlertMonitor
from mindformers_tbplugin.callbacks.histogram_monitor import HistogramMonitor
from mindformers_tbplugin.callbacks.tensorboard_alias import TensorBoard
from mindformers_tbplugin.callbacks.tensorboard_monitor import TensorBoardMonitor

__all__ = ["AlertMonitor", "HistogramMonitor", "TensorBoard", "TensorBoardMonitor"]

# A module above that imports mindformers makes registration run while this package is half loaded;
# register again now that every export is bound. Modules here should leave mindformers to registration.
_registration = __import__("sys").modules.get("mindformers_tbplugin.registration.mindformers_registry")
if _registration is not None and hasattr(_registration, "register_callbacks"):
    _registration.register_callbacks()
