"""TensorBoard monitoring for MindFormers.

Importing this package is cheap (standard library only): it arranges for the callbacks to be
registered in MindFormers' registry as soon as ``mindformers`` is imported, or at once if it already
is. The installed ``mindformers_tbplugin_autoregister.pth`` imports this package in every Python
process of the environment, which is how ``type: TensorBoardMonitor`` resolves in a plain
``run_mindformer.py``; set ``MFTB_NO_AUTOREGISTER=1`` to switch that off.
"""

from __future__ import annotations

# No `typing` here: this module runs at every interpreter start, and `typing` alone costs ~10 ms.
import atexit

from mindformers_tbplugin.registration.catalog import CALLBACKS, WRAPPERS
from mindformers_tbplugin.registration.exit_status import exit_after_an_alert_stop
from mindformers_tbplugin.registration.import_hook import register_when_mindformers_loads

__version__ = "0.1.0"

# Public names, loaded on first use so that importing the package stays free of MindSpore.
_LAZY_EXPORTS = {
    **CALLBACKS,
    **WRAPPERS,
    "log_scalars": "mindformers_tbplugin.pipeline.custom_metrics",
    "log_text": "mindformers_tbplugin.pipeline.custom_metrics",
    "metric": "mindformers_tbplugin.pipeline.custom_metrics",
    "MetricKind": "mindformers_tbplugin.pipeline.metrics",
    "ConfigError": "mindformers_tbplugin.schema",
}

__all__ = [*_LAZY_EXPORTS, "__version__"]


def __getattr__(name: str) -> object:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'mindformers_tbplugin' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)


register_when_mindformers_loads()
# Registered first, so run last at exit: an alert stop's exit status 3 under any entry (exit_status.py).
atexit.register(exit_after_an_alert_stop)
