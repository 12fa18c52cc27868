"""``mftb register-path``: the folder for MindFormers' REGISTER_PATH / auto_register route."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "register-path"
HELP = "print the folder to use as REGISTER_PATH for MindFormers' auto_register route"
DESCRIPTION = (
    "Print the folder holding mftb_register.py. Use it as REGISTER_PATH (or run_mindformer.py "
    "--register_path) with 'auto_register: mftb_register.TensorBoardMonitor' in the callback entry."
)
REGISTER_FOLDER = Path(__file__).resolve().parents[1] / "registration" / "register_path"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace, extra: list[str]) -> int:
    print(REGISTER_FOLDER)
    return 0
