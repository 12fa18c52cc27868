"""`mftb tensorboard`'s options and docs/cli.md's table of them (the command runs in
tests/viewer/test_tensorboard_server.py and tests/viewer/test_protected_server.py)."""

from __future__ import annotations

import argparse
import re

from conftest import REPO

from mindformers_tbplugin.commands import tensorboard
from mindformers_tbplugin.viewer.access_token import TOKEN_ENV


def test_docs_cli_lists_every_option_of_mftb_tensorboard() -> None:
    parser = argparse.ArgumentParser()
    tensorboard.add_arguments(parser)
    options = {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split("## `mftb tensorboard`", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(--[a-z_]+)", section, flags=re.MULTILINE))
    assert documented == options - {"--help"}
    assert f"| `{TOKEN_ENV}` |" in section
