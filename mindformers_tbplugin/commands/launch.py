"""``mftb launch``: the msrun launcher (``scripts/msrun_launch.sh``) for installed environments."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

NAME = "launch"
HELP = "validate a config and start it with msrun on this node (per-rank log routing)"
DESCRIPTION = (
    "Run msrun_launch.sh, shipped with the package: --config CONFIG --worker_num N [--local_worker_num N] "
    "[--node_rank R] [--master_addr A] [--master_port P] [--output_dir D] "
    '[--entry "mftb train" | path/to/run_mindformer.py] [-- extra arguments for the entry].'
)
ACCEPTS_EXTRA = True
SCRIPT = Path(__file__).resolve().parents[1] / "msrun_launch.sh"
# Framework packages it needs (checked by mftb before it runs).
FRAMEWORK = ("mindspore",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="options for msrun_launch.sh")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    argv = [*extra, *args.arguments]
    os.execv("/bin/bash", ["bash", str(SCRIPT), *argv])
    return 0  # not reached: exec replaces this process
