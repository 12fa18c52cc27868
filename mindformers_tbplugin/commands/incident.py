"""``mftb incident``: the incidents AlertMonitor recorded in a run, as it wrote them to the Text tab."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "incident"
HELP = "print the incidents of a run's alerts (exit 0; 2 when there is none or the path is wrong)"
DESCRIPTION = (
    "Print the incidents AlertMonitor recorded under LOGDIR (every run in it) or in one RUN folder: for each "
    "alert, the ranks with the highest loss at its step, the layers that stood out, the learning rate, gradient "
    "norm and loss scale, the last checkpoint saved before it and the YAML lines that resume from that checkpoint "
    "past the step's batch. --step N: only the incidents at step N. Exit status: 0 incidents printed, 2 none "
    "found, or the path is not a folder."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="LOGDIR|RUN", help="a TensorBoard log folder, or one run's folder in it")
    parser.add_argument("--step", type=int, help="only the incidents at this step")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.alerts.incident import INCIDENT_TAG
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.tfevents.run_folders import walk_runs
    from mindformers_tbplugin.tfevents.texts import read_texts

    root = Path(args.path).expanduser()
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder (give a TensorBoard log folder or a run's folder)")
    found = 0
    for run_dir, files in walk_runs(root, prune=False):
        for step, text in read_texts(files, INCIDENT_TAG):
            if args.step is None or step == args.step:
                found += 1
                print(f"## {run_dir.relative_to(root).as_posix() or run_dir.name}, step {step}\n\n{text}\n")
    if not found:
        at = "" if args.step is None else f" at step {args.step}"
        print(
            f"mftb incident: no incident{at} under {root} (AlertMonitor records one with every alert it reports)",
            file=sys.stderr,
        )
        return 2
    return 0
