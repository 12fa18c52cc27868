"""Register our classes in MindFormers' registry the moment ``mindformers`` finishes importing.

A meta-path finder watches for the top-level ``mindformers`` import, lets the real loader run, then
imports :mod:`mindformers_tbplugin.registration.mindformers_registry`. Processes that never import mindformers pay only
for this module (standard library, no I/O). Nothing here may break the user's import: a failure to
register is reported as a warning. A failing ``import mindformers`` reaches its importer unchanged, and
is remembered so that our later uses of mindformers report it instead of importing again.
"""

from __future__ import annotations

import sys

_TARGET = "mindformers"


def _register_now() -> None:
    try:
        from mindformers_tbplugin.registration.mindformers_registry import register_callbacks

        register_callbacks()
    except Exception as exc:  # registration must never break `import mindformers`
        import warnings  # here, not at the top: this module loads at every interpreter start

        warnings.warn(f"mindformers_tbplugin: could not register callbacks: {exc!r}", stacklevel=2)


def _remember_failure(exc: Exception) -> None:
    """Keep what ``import mindformers`` raised, for our later uses of mindformers to report it instead
    of importing again over the submodules the failed import left behind."""
    try:
        from mindformers_tbplugin.framework.mindformers_api import remember_import_failure

        remember_import_failure(exc)
    except Exception:  # the user's import error must reach them unchanged, whatever happens here
        pass


class _RegisterAfterExec:
    """Loader proxy: runs the real loader, restores it on the module, then registers."""

    def __init__(self, loader: object) -> None:
        self._loader = loader

    def create_module(self, spec: object) -> object:
        return self._loader.create_module(spec)

    def exec_module(self, module: object) -> None:
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        try:
            self._loader.exec_module(module)  # mindformers itself: an error below is not mindformers_tbplugin's
        except Exception as exc:
            _remember_failure(exc)
            raise  # unchanged, to whoever imported mindformers
        _register_now()


class _MindFormersImportWatcher:
    """Meta-path finder that fires once, for the top-level ``mindformers`` package."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> object:
        if fullname != _TARGET:
            return None
        _uninstall()
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(fullname, path, target) if find_spec else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RegisterAfterExec(spec.loader)
                return spec
        return None


def _uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _MindFormersImportWatcher)]


def register_when_mindformers_loads() -> None:
    """Register now if mindformers is loaded, else as soon as it is. Idempotent."""
    if _TARGET in sys.modules:
        _register_now()
    elif not any(isinstance(f, _MindFormersImportWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _MindFormersImportWatcher())
