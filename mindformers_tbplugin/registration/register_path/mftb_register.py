"""Module for MindFormers' own registration route (REGISTER_PATH + ``auto_register``).

MindFormers copies this file into its module cache and reads the named class from it::

    callbacks:
      - type: TensorBoardMonitor
        auto_register: mftb_register.TensorBoardMonitor

with ``REGISTER_PATH=$(mftb register-path)`` (or ``run_mindformer.py --register_path ...``). Every class
of the package's catalog is here by its name.
"""

from mindformers_tbplugin.registration.catalog import CALLBACKS, WRAPPERS, load

globals().update({name: load(name) for name in (*CALLBACKS, *WRAPPERS)})
__all__ = [*CALLBACKS, *WRAPPERS]
