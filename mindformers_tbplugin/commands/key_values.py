"""``KEY=VALUE`` on the command line, read one way everywhere: the value with YAML's scalar rules
(numbers, booleans, lists, strings; text that is no YAML stays text)."""

from __future__ import annotations

import re
from typing import Any

from mindformers_tbplugin.errors import UsageError

# YAML 1.1 reads an exponent without a dot (``1e-4``) as a string; on a command line it is a number.
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def yaml_value(text: str) -> Any:
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return float(value) if isinstance(value, str) and _EXPONENT.fullmatch(text.strip()) else value


def key_value(item: str, what: str, expected: str = "KEY=VALUE") -> tuple[str, Any]:
    """``("a.b", 2)`` from ``"a.b=2"``; a UsageError naming ``what`` (e.g. ``--options``) otherwise."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"{what}: expected {expected}, got {item!r}")
    return key.strip(), yaml_value(value)
