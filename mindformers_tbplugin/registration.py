"""Importing this module registers every class of ours in MindFormers' registry."""

from mindformers.tools.register import MindFormerModuleType, MindFormerRegister

from mindformers_tbplugin import cpu_wrapper  # noqa: F401  (its decorator registers the wrapper)
from mindformers_tbplugin.callback_types import our_callbacks
from mindformers_tbplugin.log import route_to_mindformers


def register_callbacks() -> None:
    """Every exported callback under its class name (the callback modules do not import mindformers).
    Idempotent; called again by the callbacks package when it finishes importing, in case
    mindformers was first imported while that package was still half-initialised."""
    for callback in our_callbacks().values():
        MindFormerRegister.register_cls(callback, module_type=MindFormerModuleType.CALLBACK)
    route_to_mindformers()


register_callbacks()
