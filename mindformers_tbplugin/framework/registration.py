"""Importing this module registers every class of ours in MindFormers' registry."""

from mindformers_tbplugin.callbacks.catalog import our_callbacks
from mindformers_tbplugin.framework.mindformers_api import register
from mindformers_tbplugin.log import logger, route_to_mindformers


def register_callbacks() -> None:
    """Every exported callback under its class name (the callback modules do not import mindformers),
    then the CPU runner wrapper. Idempotent; called again by the callbacks package when it finishes
    importing, in case mindformers was first imported while that package was still half-initialised."""
    for callback in our_callbacks().values():
        register(callback, "CALLBACK")
    route_to_mindformers()
    try:
        from mindformers_tbplugin.framework import cpu_wrapper  # noqa: F401  (importing it registers the wrapper)
    except Exception as exc:  # a release without MindFormers' train wrapper: the callbacks still work
        logger.warning("CPUTrainOneStepCell is not available with this MindFormers (%r)", exc)


register_callbacks()
