"""``mftb train``: train with a MindFormers YAML config (run_mindformer.py's training entry)."""

from __future__ import annotations

import argparse

NAME = "train"
HELP = "train with a MindFormers YAML config (run_mindformer.py's training entry)"
DESCRIPTION = (
    "Train with a MindFormers YAML config, as run_mindformer.py does. Unknown '--key.sub value' pairs "
    "override config keys. Usable as the script msrun starts on every rank. The callbacks: block is checked "
    "first, as mftb validate does: a problem stops it before anything is built (exit status 2)."
)
ACCEPTS_EXTRA = True
# Framework packages it needs (checked by mftb before it runs).
FRAMEWORK = ("mindspore", "mindformers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mindformers_tbplugin.framework.training_entry import add_train_arguments

    add_train_arguments(parser)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.config.checker import check_before_training
    from mindformers_tbplugin.framework import training_entry

    check_before_training(args.config)  # every callback problem at once, before MindFormers builds anything
    training_entry.run(args, extra)
    return 0
