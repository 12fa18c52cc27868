"""Everything that makes ``type: TensorBoardMonitor`` resolve in MindFormers, in one room.

* ``catalog.py``: the one list of the classes we register, by YAML name.
* ``import_hook.py``: the hook that ``mindformers_tbplugin_autoregister.pth`` installs at interpreter
  start: it registers the catalog the moment ``mindformers`` is imported.
* ``mindformers_registry.py``: registering the catalog in MindFormers' registry.
* ``exit_status.py``: exit status 3 after an alert stop, under ``mftb train`` or any other entry.
* ``team_defaults.py``: the team's defaults file (``MFTB_DEFAULTS``), completing every training config.
* ``register_path/mftb_register.py``: the module MindFormers' own route (``REGISTER_PATH`` +
  ``auto_register``) loads; ``mftb register-path`` prints its folder.

Importing this package costs nothing (it runs at every interpreter start through the ``.pth``).
"""
