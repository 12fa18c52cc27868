"""One module per ``mftb`` sub-command.

Each module defines ``NAME``, ``HELP`` and ``add_arguments(parser)`` and ``run(args, extra) -> int``
(``extra``: arguments argparse did not recognise; only commands with ``ACCEPTS_EXTRA = True`` get
any). Raise :class:`mindformers_tbplugin.errors.UsageError` (or ``ConfigError``) for user mistakes:
``mftb`` prints the message without a traceback and exits with status 2.
"""
