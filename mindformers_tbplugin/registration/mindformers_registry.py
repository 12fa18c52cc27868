"""Importing this module registers every class of the catalog in MindFormers' registry, and has every
training config loaded afterwards completed from the team's defaults file (registration/team_defaults.py)."""

from mindformers_tbplugin.framework.config_hooks import complete_training_configs
from mindformers_tbplugin.framework.mindformers_api import register, resolve
from mindformers_tbplugin.log import logger, route_to
from mindformers_tbplugin.registration.catalog import WRAPPERS, load, our_callbacks
from mindformers_tbplugin.registration.team_defaults import DEFAULTS_ENV, complete_at_load, defaults_path


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
    try:
        complete_training_configs(complete_at_load)
    except Exception as exc:  # registration must never break `import mindformers`
        if defaults_path() is not None:
            logger.warning(
                "the team defaults file (%s) cannot be applied with this MindFormers (%r)", DEFAULTS_ENV, exc
            )


register_callbacks()
