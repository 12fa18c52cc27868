"""Importing this module registers every class of the catalog in MindFormers' registry."""

from mindformers_tbplugin.framework.mindformers_api import register, resolve
from mindformers_tbplugin.log import logger, route_to
from mindformers_tbplugin.registration.catalog import WRAPPERS, load, our_callbacks


def register_callbacks() -> None:
    """Every callback under its YAML name, then the runner wrappers. Idempotent."""
    for callback in our_callbacks().values():
        register(callback, "CALLBACK")
    route_to(resolve("mindformers_logger"))
    for name in WRAPPERS:
        try:
            register(load(name), "WRAPPER")
        except Exception as exc:  # a release without MindFormers' train wrapper: the callbacks still work
            logger.warning("%s is not available with this MindFormers (%r)", name, exc)


register_callbacks()
