"""The one list of the classes this package registers in MindFormers' registry, by the name a YAML
entry's ``type:`` gives them, with the module that defines each. Registration, ``mftb validate``,
``mftb schema``, the package's public names and ``mftb_register.py`` all read it here, so a new
callback needs one line. Standard library only: the package's import reads it at interpreter start.
"""

from __future__ import annotations

# YAML type -> module. Callback modules must not import mindformers at module level (registration
# does that for them), which keeps `mftb validate` free of the ~6 s mindformers import.
CALLBACKS = {
    "TensorBoardMonitor": "mindformers_tbplugin.callbacks.tensorboard_monitor",
    "TensorBoard": "mindformers_tbplugin.callbacks.tensorboard_alias",
    "HistogramMonitor": "mindformers_tbplugin.callbacks.histogram_monitor",
    "AlertMonitor": "mindformers_tbplugin.callbacks.alert_monitor",
}
# runner_wrapper types (MindFormerModuleType.WRAPPER): imported only where MindFormers is.
WRAPPERS = {"CPUTrainOneStepCell": "mindformers_tbplugin.framework.cpu_wrapper"}


def load(name: str) -> type:
    """The class registered as ``name``."""
    import importlib  # here, not at the top: this module loads at every interpreter start (~0.4 ms)

    return getattr(importlib.import_module({**CALLBACKS, **WRAPPERS}[name]), name)


def our_callbacks() -> dict[str, type]:
    """``{YAML type name: class}`` of every callback."""
    return {name: load(name) for name in CALLBACKS}
