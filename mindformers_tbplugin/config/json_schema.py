"""JSON Schema (draft-07) of the ``callbacks:`` entries, derived from the same parameter schemas.

Editors' YAML language servers use it for completion, hover docs and squiggles; it describes a whole
MindFormers config but constrains only ``callbacks`` and ``eval_callbacks``. Our entries are closed
(unknown keys are errors); other entries only need a ``type`` that is not one of ours.
"""

from __future__ import annotations

import typing
from typing import Any

from mindformers_tbplugin.schema import UNION_ORIGINS, Param, params_of, summary_of

DRAFT = "http://json-schema.org/draft-07/schema#"
AUTO_REGISTER_DOC = "MindFormers' module route: 'module_file.ClassName' found on REGISTER_PATH."


def type_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a Python type hint as the schema module uses them."""
    origin = typing.get_origin(tp)
    if origin in UNION_ORIGINS:
        return {"anyOf": [type_schema(arg) for arg in typing.get_args(tp)]}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin is list or tp is list:
        args = typing.get_args(tp)
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is dict or tp is dict:
        return {"type": "object"}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
    return {"type": simple[tp]} if tp in simple else {}


def param_schema(param: Param) -> dict[str, Any]:
    if param.choices:
        schema = {"enum": list(param.choices.values)}
    elif param.kind is not None and param.kind.json_schema is not None:
        schema = dict(param.kind.json_schema)
    else:
        schema = type_schema(param.type)
    if param.range is not None:
        if param.range.min is not None:
            schema["minimum"] = param.range.min
        if param.range.max is not None:
            schema["maximum"] = param.range.max
    if param.optional:
        schema = {"anyOf": [schema, {"type": "null"}]}
    if param.doc:
        schema["description"] = param.doc
    if not param.required:
        schema["default"] = param.default
    return schema


def entry_schema(cls: type) -> dict[str, Any]:
    params = params_of(cls)
    summary = summary_of(cls)
    return {
        "type": "object",
        "description": summary,
        "required": ["type", *(p.name for p in params if p.required)],
        "properties": {
            "type": {"const": cls.__name__, "description": summary},
            "auto_register": {"type": "string", "description": AUTO_REGISTER_DOC},
            **{p.name: param_schema(p) for p in params},
        },
        "additionalProperties": False,
    }


def config_schema(ours: dict[str, type]) -> dict[str, Any]:
    """Schema of a MindFormers YAML config whose callback lists may hold our entries."""
    names = sorted(ours)
    other = {
        "type": "object",
        "description": "A callback from MindFormers' registry (or registered by auto_register).",
        "required": ["type"],
        "properties": {"type": {"type": "string", "not": {"enum": names}}},
    }
    entries = [{"$ref": f"#/definitions/{name}"} for name in names]
    callback_list = {"type": "array", "items": {"anyOf": [*entries, {"$ref": "#/definitions/OtherCallback"}]}}
    return {
        "$schema": DRAFT,
        "title": "MindFormers config with mindformers-tbplugin callbacks",
        "type": "object",
        "properties": {
            "callbacks": {**callback_list, "description": "Training callbacks, built from MindFormers' registry."},
            "eval_callbacks": {**callback_list, "description": "Evaluation callbacks."},
        },
        "definitions": {**{name: entry_schema(ours[name]) for name in names}, "OtherCallback": other},
    }
