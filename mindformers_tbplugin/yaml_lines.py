"""A YAML document with its node tree, and the line a problem's path (``callbacks[2].rules[0].k``) is on.

``mftb validate`` and ``mftb watch --config`` name the line of every problem; one parse gives both the
document and the nodes that carry the line numbers.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def load(text: str) -> tuple[Any, yaml.Node | None]:
    """The document (as ``yaml.safe_load`` builds it) and its node tree. Raises ``yaml.YAMLError``."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


def line_of(root: yaml.Node | None, path: str) -> int | None:
    """1-based line of the deepest node on ``path`` that exists: a mapping entry's key line, a list item's line."""
    node, line = root, None
    for name, index in _PATH_PART.findall(path):
        child = key = None
        if index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            child = node.value[int(index)]
        elif name and isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == name:
                    key, child = key_node, value_node  # the last one wins, as in the loaded document
        if child is None:
            break
        line = (key or child).start_mark.line + 1
        node = child
    return line
