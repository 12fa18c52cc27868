"""``mftb train``: train with a MindFormers YAML config (run_mindformer.py's training entry)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mindformers_tbplugin.registration import exit_status
from mindformers_tbplugin.registration.exit_status import STOPPED_BY_ALERT

NAME = "train"
HELP = "train with a MindFormers YAML config (run_mindformer.py's training entry; exit 3: an alert stopped it)"
DESCRIPTION = (
    "Train with a MindFormers YAML config, as run_mindformer.py does. Unknown '--key.sub value' pairs "
    "override config keys. Usable as the script msrun starts on every rank. The callbacks: block is checked "
    "first, as mftb validate does: a problem stops it before anything is built. Exit status: 0 training "
    "ended, 1 training failed, 2 a problem in the command line or the config, "
    f"{STOPPED_BY_ALERT} an AlertMonitor rule with action: stop ended training (on every rank of a job)."
)
ACCEPTS_EXTRA = True
# Framework packages it needs (checked by mftb before it runs).
FRAMEWORK = ("mindspore", "mindformers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mindformers_tbplugin.commands.training_entry import add_train_arguments

    add_train_arguments(parser)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.commands import training_entry

    check_before_training(args.config)  # every callback problem at once, before MindFormers builds anything
    training_entry.run(args, extra)
    return status_after_training()


def status_after_training() -> int:
    """0, or STOPPED_BY_ALERT when an alert stopped training. Every rank of a job agreed on that stop
    (it rode in the cross-rank aggregation), so every rank returns the same status; none returns
    before all have ended training, since msrun kills the other ranks as soon as one exits non-zero
    (a checkpoint still being saved would be cut short)."""
    return exit_status.report_alert_stop("mftb train")


def check_before_training(path: str | Path) -> None:
    """The ``mftb validate`` check, before anything is built.

    Prints warnings to stderr; raises UsageError for an unusable file and ConfigError listing every
    problem, both reported by ``mftb`` without a traceback (exit status 2). A missing file is left to
    the training entry's own message.
    """
    from mindformers_tbplugin.config.checker import check_file
    from mindformers_tbplugin.config.report import count
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.schema import ConfigError

    path = Path(path).expanduser().resolve()
    if not path.is_file():
        return
    report = check_file(path)
    for finding in report.warnings:
        print(f"mftb: warning: {path}: {finding.render()}", file=sys.stderr)
    lines = "\n".join(f"  - {finding.render()}" for finding in report.errors)
    if report.unusable:
        raise UsageError(f"{path} cannot be used:\n{lines}")
    if report.errors:
        raise ConfigError(f"{path}: {count(len(report.errors), 'problem')} in the callbacks, nothing built:\n{lines}")
