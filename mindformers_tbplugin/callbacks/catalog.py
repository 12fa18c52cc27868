"""Our callback types: every MindSpore Callback exported by :mod:`mindformers_tbplugin.callbacks`.

The package's ``__all__`` is the one list: registration in MindFormers' registry, config validation
and ``mftb schema`` all read it here, so a new callback module needs only its export. Callback modules
must not import mindformers at module level (registration does that for them), which keeps
``mftb validate`` free of the ~6 s mindformers import.
"""

from __future__ import annotations

import importlib
import inspect

CALLBACKS_PACKAGE = "mindformers_tbplugin.callbacks"


def our_callbacks() -> dict[str, type]:
    """``{YAML type name: class}`` for every Callback subclass the callbacks package exports."""
    from mindformers_tbplugin.framework.mindformers_api import resolve

    Callback = resolve("Callback")

    package = importlib.import_module(CALLBACKS_PACKAGE)
    found = {}
    for name in getattr(package, "__all__", ()):
        obj = getattr(package, name, None)
        if inspect.isclass(obj) and issubclass(obj, Callback):
            found[obj.__name__] = obj
    return found
