"""commands/key_values.py: ``KEY=VALUE`` arguments read one way for every command. The value by YAML's
scalar rules (numbers, booleans, null, lists, quoted strings), text that is no YAML kept as typed, the
key split at the first ``=`` and stripped, and a usage error naming the option for anything else."""

from __future__ import annotations

from typing import Any

import pytest

from mindformers_tbplugin.commands.key_values import key_value, yaml_value
from mindformers_tbplugin.errors import UsageError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        ("0.5", 0.5),
        ("1.0e-4", 0.0001),
        ("1e-4", 0.0001),  # YAML 1.1 wants a dot; a learning rate typed as 1e-4 is still a number
        ("-2E3", -2000.0),
        ("'1e-4'", "1e-4"),  # quoted: a string
        ("0x10", 16),  # YAML 1.1 integers, as in the config file itself
        ("true", True),
        ("False", False),
        ("null", None),
        ("", None),  # `key=`: YAML's empty scalar
        ("[1, 2]", [1, 2]),
        ("'007'", "007"),  # quoted: a string, not a number
        ("./output/tb", "./output/tb"),
        ("x=y", "x=y"),
    ],
)
def test_values_follow_yamls_scalar_rules(text: str, value: Any) -> None:
    assert yaml_value(text) == value
    assert type(yaml_value(text)) is type(value)


@pytest.mark.parametrize("text", ["[1, 2", "=", "{a: 1", "*alias"])
def test_text_that_is_no_yaml_stays_as_typed(text: str) -> None:
    assert yaml_value(text) == text


@pytest.mark.parametrize(
    ("item", "pair"),
    [
        ("a.b=2", ("a.b", 2)),
        (" runner_config.epochs = 3", ("runner_config.epochs", 3)),  # the key is stripped, the value is YAML
        ("rule==1", ("rule", "=1")),  # the first '=' splits
        ("tag=train/loss", ("tag", "train/loss")),
        ("flag=", ("flag", None)),
    ],
)
def test_a_pair_is_split_at_the_first_equals_sign(item: str, pair: tuple[str, Any]) -> None:
    assert key_value(item, "--options") == pair


@pytest.mark.parametrize("item", ["no_equals", "=3", "  =3", ""])
def test_a_pair_without_a_key_is_a_usage_error_naming_the_option(item: str) -> None:
    with pytest.raises(UsageError) as caught:
        key_value(item, "--rule 'spike,window'", "NAME,param=value,...")
    assert str(caught.value) == f"--rule 'spike,window': expected NAME,param=value,..., got {item!r}"
    with pytest.raises(UsageError, match=r"^--options: expected KEY=VALUE, got "):
        key_value(item, "--options")
