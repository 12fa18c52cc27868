"""``mftb``: the command line. Each sub-command lives in ``mindformers_tbplugin/commands/``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Sub-command modules, in the order ``mftb --help`` lists them.
COMMANDS = (
    "mindformers_tbplugin.commands.train",
    "mindformers_tbplugin.commands.launch",
    "mindformers_tbplugin.commands.validate",
    "mindformers_tbplugin.commands.migrate",
    "mindformers_tbplugin.commands.schema",
    "mindformers_tbplugin.commands.make_data",
    "mindformers_tbplugin.commands.register_path",
    "mindformers_tbplugin.commands.tensorboard",
    "mindformers_tbplugin.commands.watch",
    "mindformers_tbplugin.commands.incident",
    "mindformers_tbplugin.commands.doctor",
    "mindformers_tbplugin.commands.import_runs",
    "mindformers_tbplugin.commands.compare",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mftb", description="TensorBoard monitoring for MindFormers training.")
    # sys.modules: the package is imported whenever this module is (its __init__ runs first).
    version = sys.modules["mindformers_tbplugin"].__version__
    parser.add_argument("--version", action="version", version=f"%(prog)s {version}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMANDS:
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(module.NAME, help=module.HELP, description=getattr(module, "DESCRIPTION", None))
        module.add_arguments(sub)
        sub.set_defaults(command_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = args.command_module
    if extra and not getattr(module, "ACCEPTS_EXTRA", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.schema import ConfigError

    try:
        check_framework(getattr(module, "FRAMEWORK", ()))
        return module.run(args, extra)
    except (UsageError, ConfigError) as exc:
        print(f"mftb {args.command}: error: {exc}", file=sys.stderr)
        return 2


def check_framework(packages: tuple[str, ...]) -> None:
    """The MindSpore/MindFormers a command needs: missing is an error, an untested release a warning.
    A MindFormers release checkout in the working directory is used as run_mindformer.py would."""
    if not packages:
        return
    from pathlib import Path

    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.framework import versions

    checkout = versions.use_checkout_in(Path.cwd())
    if checkout is not None:
        print(f"mftb: using MindFormers {checkout.version} from the checkout {checkout.location}", file=sys.stderr)
    errors, warnings = versions.check(packages)
    for warning in warnings:
        print(f"mftb: warning: {warning}", file=sys.stderr)
    if errors:
        raise UsageError("; ".join(errors))


if __name__ == "__main__":
    sys.exit(main())
