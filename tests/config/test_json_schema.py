"""config/json_schema.py: the JSON Schema (draft-07) editors check configs with, derived from the
callbacks' parameter schemas. Each Python hint and constraint as its JSON Schema, a whole entry of a
class written here (closed to unknown keys, ``type`` and required keys required), and the config's
schema: it accepts every bundled config, rejects what ``mftb validate`` rejects, and lets other
callbacks through unless they borrow one of our names. That `mftb schema` prints this schema:
tests/test_schema.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import jsonschema
import pytest
import yaml
from conftest import REPO

from mindformers_tbplugin.config.json_schema import (
    AUTO_REGISTER_DOC,
    DRAFT,
    config_schema,
    entry_schema,
    param_schema,
    type_schema,
)
from mindformers_tbplugin.registration.catalog import our_callbacks
from mindformers_tbplugin.schema import NON_EMPTY_TEXT, Range, params_of

BUNDLED = sorted((REPO / "configs").rglob("*.yaml"))


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return config_schema(our_callbacks())


@pytest.mark.parametrize("config", BUNDLED, ids=lambda p: p.name)
def test_json_schema_accepts_the_bundled_configs(schema: dict, config: Any) -> None:
    document = yaml.safe_load(config.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(document)
    assert any(entry["type"] == "TensorBoardMonitor" for entry in document["callbacks"])


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "TensorBoardMonitor", "log_every": -5},
        {"type": "TensorBoardMonitor", "log_evry": 5},
        {"type": "TensorBoardMonitor", "rank_policy": "everyone"},
        {"type": "TensorBoardMonitor", "vs_tokens": "yes"},
        {"type": "HistogramMonitor", "bins": 1},
        {"log_dir": "/tmp/tb"},
    ],
)
def test_json_schema_rejects_what_validate_rejects(schema: dict, entry: dict) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate({"callbacks": [entry]})


# -- hints and parameters -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (bool, {"type": "boolean"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (str, {"type": "string"}),
        (type(None), {"type": "null"}),
        (list, {"type": "array"}),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (dict, {"type": "object"}),
        (dict[str, float], {"type": "object"}),
        (Literal["writer", "all"], {"enum": ["writer", "all"]}),
        (bool | Literal["auto"], {"anyOf": [{"type": "boolean"}, {"enum": ["auto"]}]}),
        (str | list[str], {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
        (Any, {}),  # unconstrained
        (bytes, {}),
    ],
)
def test_each_hint_has_its_json_schema(hint: Any, expected: dict[str, Any]) -> None:
    assert type_schema(hint) == expected


class Sample:
    """Sample callback for the schema.

    Args:
        tag: Tag to follow.
        every: Every this many steps.
        mode: How to follow it.
        folder: Where to write.
        ratio: A share.
        patterns: Shell patterns.
    """

    def __init__(
        self,
        tag: Annotated[str, NON_EMPTY_TEXT],
        every: Annotated[int, Range(min=1, max=100)] = 10,
        mode: Literal["fast", "exact"] = "fast",
        folder: str | None = None,
        ratio: Annotated[float | None, Range(min=0)] = 0.5,
        patterns: list[str] | None = None,
    ) -> None:
        pass


def test_each_parameter_has_its_type_constraints_doc_and_default() -> None:
    schemas = {param.name: param_schema(param) for param in params_of(Sample)}
    assert schemas == {
        # A kind's own JSON Schema; required: no default.
        "tag": {"type": "string", "pattern": "\\S", "description": "Tag to follow."},
        "every": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "description": "Every this many steps.",
            "default": 10,
        },
        "mode": {"enum": ["fast", "exact"], "description": "How to follow it.", "default": "fast"},
        "folder": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "Where to write.", "default": None},
        # The range constrains the number; null stays allowed beside it.
        "ratio": {
            "anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}],
            "description": "A share.",
            "default": 0.5,
        },
        "patterns": {
            "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
            "description": "Shell patterns.",
            "default": None,
        },
    }


def test_an_entry_is_closed_and_requires_its_type_and_required_keys() -> None:
    entry = entry_schema(Sample)
    assert {key: entry[key] for key in ("type", "description", "required", "additionalProperties")} == {
        "type": "object",
        "description": "Sample callback for the schema.",
        "required": ["type", "tag"],
        "additionalProperties": False,
    }
    assert list(entry["properties"]) == ["type", "auto_register", "tag", "every", "mode", "folder", "ratio", "patterns"]
    assert entry["properties"]["type"] == {"const": "Sample", "description": "Sample callback for the schema."}
    assert entry["properties"]["auto_register"] == {"type": "string", "description": AUTO_REGISTER_DOC}


# -- the config ------------------------------------------------------------------------------------------
def test_both_callback_lists_hold_our_entries_or_other_callbacks() -> None:
    schema = config_schema({"Sample": Sample})
    assert (schema["$schema"], schema["type"]) == (DRAFT, "object")
    assert set(schema["definitions"]) == {"Sample", "OtherCallback"}
    validator = jsonschema.Draft7Validator(schema)
    good = [
        {"type": "Sample", "tag": "train/loss", "every": 5, "auto_register": "sample.Sample"},
        {"type": "CheckpointMonitor", "save_checkpoint_steps": 100, "anything": [1, 2]},
    ]
    for key in ("callbacks", "eval_callbacks"):
        assert list(validator.iter_errors({key: good, "model": {"whatever": 1}})) == []
    bad = [
        {"type": "Sample"},  # tag is required
        {"type": "Sample", "tag": "t", "unknown": 1},  # our entries are closed
        {"type": "Sample", "tag": "t", "every": 0},
        {"type": "Sample", "tag": " "},  # a blank tag is no tag
        {"save_checkpoint_steps": 100},  # every entry names its type
        {"type": 3},
    ]
    for entry in bad:
        assert not validator.is_valid({"callbacks": [entry]}), entry
