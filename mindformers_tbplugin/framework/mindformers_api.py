"""The MindFormers and MindSpore names the plugin uses, resolved for the release that is running.

Each name lists where it lives, newest layout first, with the releases that use that place; the
first importable place wins. A name that moves in a new release gets one more line here and nowhere
else. Everything is imported on first use: ``mftb`` commands that never train stay free of the
seconds-long framework imports.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

# name: ((module, releases that define it there), ...)
LOCATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "set_output_path": (
        ("mindformers.utils.file_utils", "mindformers 1.8, 1.9, 2.0"),
        ("mindformers.tools.utils", "mindformers 1.7"),
    ),
    "MindFormerRegister": (("mindformers.tools.register", "mindformers 1.7-2.0"),),
    "MindFormerModuleType": (("mindformers.tools.register", "mindformers 1.7-2.0"),),
    "MindFormerConfig": (("mindformers.tools.register", "mindformers 1.7-2.0"),),
    # where a training config's dict is completed before MindFormers reads it (framework/config_hooks.py)
    "ConfigTemplate": (("mindformers.tools.register.template", "mindformers 1.7-2.0 and master"),),
    "TrainConfig": (("mindformers.pynative.config.config", "mindformers 1.9 (preview), 2.0 and master"),),
    "build_context": (("mindformers.core.context", "mindformers 1.7-2.0"),),
    "Trainer": (("mindformers.trainer", "mindformers 1.7-2.0 (the classic trainer)"),),
    "BaseTrainer": (("mindformers.trainer.base_trainer", "mindformers 1.7-2.0"),),
    "Context": (("mindformers.core.context.build_context", "mindformers 1.7-2.0"),),
    "MFTrainOneStepCell": (("mindformers.wrapper.wrapper", "mindformers 1.7-2.0"),),
    "mindformers_logger": (("mindformers.tools.logger", "mindformers 1.7-2.0"),),
    # mcore models (use_legacy: False)
    "get_real_models": (("mindformers.wrapper.wrapper", "mindformers 1.7-2.0"),),
    "parameter_register": (("mindformers.utils.parameter_register", "mindformers 1.7-2.0"),),
    "convert_transformer_config_to_args_for_tflops": (("mindformers.models.utils", "mindformers 1.9, 2.0"),),
    "num_floating_point_operations": (("mindformers.models.utils", "mindformers 1.9, 2.0"),),
    # MindFormers 2.x's PyNative models: where each step's loss parts are summed over its micro-batches
    "get_moe_layer_wise_logging_tracker": (
        ("mindformers.pynative.transformers.moe.moe_utils", "mindformers 2.0 and master"),
    ),
    "get_mtp_layer_wise_logging_tracker": (
        ("mindformers.pynative.transformers.multi_token_prediction", "mindformers 2.0 and master"),
    ),
    "get_indexer_loss_tracker": (
        ("mindformers.pynative.transformers.experimental_attention_variant.utils", "mindformers 2.0 and master"),
    ),
    # Private in MindSpore: the is-finite overflow check that every backend has a kernel for.
    "finite_check_overflow": (("mindspore.nn.wrap.loss_scale", "mindspore 2.7-2.10"),),
    "Callback": (("mindspore.train", "mindspore 2.7-2.10"),),
}
# Where the attribute's own name differs from ours.
_ATTRIBUTES = {"mindformers_logger": "logger", "finite_check_overflow": "_ascend_grad_overflow"}
_resolved: dict[str, Any] = {}
_import_failures: list[Exception] = []  # what ``import mindformers`` raised in this process, first only


def import_mindformers() -> ModuleType:
    """The ``mindformers`` package, imported at most once.

    When its import fails (a missing dependency, a broken install), the submodules it finished stay
    in ``sys.modules``: names imported from them later seem to work and a second import of the package
    fails further on with a ``NameError`` or ``AttributeError`` of a half-initialised module. So a
    failure, ours or one the import hook saw in the user's own ``import mindformers``, is never retried:
    it raises FrameworkImportError with the original error every time. A mindformers that is not
    installed raises the plain ModuleNotFoundError.
    """
    module = sys.modules.get("mindformers")
    if module is not None:
        return module
    from mindformers_tbplugin.errors import FrameworkImportError
    from mindformers_tbplugin.framework import versions

    if not _import_failures:
        try:
            return importlib.import_module("mindformers")
        except ModuleNotFoundError as exc:
            if exc.name == "mindformers":
                raise
            remember_import_failure(exc)
        except Exception as exc:
            remember_import_failure(exc)
    failure = _import_failures[0]
    raise FrameworkImportError(versions.import_failure_message("mindformers", failure)) from failure


def remember_import_failure(exc: Exception) -> None:
    """What ``import mindformers`` raised in this process (here, or where the import hook saw it)."""
    if not _import_failures:
        _import_failures.append(exc)


def resolve(name: str) -> Any:
    """The object called ``name`` in the running release. Raises ImportError naming every place tried."""
    if name in _resolved:
        return _resolved[name]
    attribute = _ATTRIBUTES.get(name, name)
    tried = []
    for module_name, releases in LOCATIONS[name]:
        try:
            if module_name.partition(".")[0] == "mindformers":
                import_mindformers()  # the package whole, or its own error: never a half-imported submodule
            module = importlib.import_module(module_name)
        except ImportError as exc:
            tried.append(f"{module_name} ({releases}): {exc}")
            continue
        if hasattr(module, attribute):
            _resolved[name] = value = getattr(module, attribute)
            return value
        tried.append(f"{module_name} ({releases}): no {attribute}")
    raise ImportError(f"{name} not found in this MindFormers/MindSpore; tried " + "; ".join(tried))


def register(cls: type, module_type: str) -> None:
    """Register ``cls`` under its class name in MindFormers' registry (``module_type``: e.g. CALLBACK)."""
    resolve("MindFormerRegister").register_cls(cls, module_type=getattr(resolve("MindFormerModuleType"), module_type))


def registered(module_type: str) -> dict[str, type]:
    """MindFormers' registry of one module type: ``{name: class}``."""
    registry = resolve("MindFormerRegister").registry
    return dict(registry.get(getattr(resolve("MindFormerModuleType"), module_type), {}))
