"""YAML paths to line numbers: the line `mftb validate` and `mftb watch --config` print for a problem."""

from __future__ import annotations

import pytest
import yaml

from mindformers_tbplugin.yaml_lines import line_of, load

TEXT = """\
# a comment
callbacks:
  - type: TensorBoardMonitor
  - type: AlertMonitor
    rules:
      - {rule: spike, k: six}
      - rule: threshold
        tag:
          - train/loss
        max-steps: 3
        tag: train/grad_norm
"""


@pytest.fixture(scope="module")
def root() -> yaml.Node:
    document, node = load(TEXT)
    assert document == yaml.safe_load(TEXT)
    return node


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("callbacks", 2),
        ("callbacks[1]", 4),
        ("callbacks[1].rules[0].k", 6),  # a flow mapping: its key's line
        ("callbacks[1].rules[1]", 7),
        ("callbacks[1].rules[1].max-steps", 10),  # keys are not only identifiers
        ("callbacks[1].rules[1].tag", 11),  # a repeated key: the last one, as in the document
        ("callbacks[1].rules[1].for_steps", 7),  # not in the file: the deepest node that is
        ("callbacks[9].log_dir", 2),
    ],
)
def test_line_of_a_path(root: yaml.Node, path: str, line: int) -> None:
    assert line_of(root, path) == line


def test_a_key_whose_value_starts_below_is_on_the_key_line() -> None:
    _, root = load("rules:\n  - rule: spike\n    tag:\n      - 5\n")
    assert line_of(root, "rules[0].tag") == 3
    assert line_of(root, "rules[0].tag[0]") == 4


def test_no_line_for_a_path_outside_the_document() -> None:
    _, root = load("rules: []\n")
    assert line_of(root, "sinks[0]") is None
    assert line_of(None, "rules") is None


def test_empty_text_and_syntax_errors() -> None:
    assert load("# nothing\n") == (None, None)
    with pytest.raises(yaml.MarkedYAMLError):
        load("rules: [\n")
