"""``mftb schema``: the JSON Schema of our callback entries, for editors' YAML language servers."""

from __future__ import annotations

import argparse
import json

NAME = "schema"
HELP = "print the JSON Schema of the callbacks: entries (for editor completion) or option tables"
DESCRIPTION = (
    "Print a JSON Schema (draft-07) for MindFormers YAML configs that constrains the callbacks: and "
    "eval_callbacks: entries of this package's callback types; point a YAML language server at the saved file. "
    "--format markdown prints each callback's option table instead."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("json", "markdown"), default="json", help="output format (default: %(default)s)"
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.config.report import quiet_output
    from mindformers_tbplugin.registration.catalog import our_callbacks

    with quiet_output():
        ours = our_callbacks()
    if args.format == "json":
        from mindformers_tbplugin.config.json_schema import config_schema

        print(json.dumps(config_schema(ours), indent=2))
    else:
        print(markdown_tables(ours))
    return 0


def markdown_tables(ours: dict[str, type]) -> str:
    """One ``| option | default | meaning |`` table per callback type, as docs/options.md lays them out."""
    from mindformers_tbplugin.schema import params_of

    sections = []
    for name in sorted(ours):
        rows = [f"### `{name}`", "", "| option | default | meaning |", "|---|---|---|"]
        for param in params_of(ours[name]):
            default = "required" if param.required else _yaml_scalar(param.default)
            rows.append(f"| `{param.name}` | `{default}` | {param.doc.replace('|', '/')} |")
        sections.append("\n".join(rows))
    return "\n\n".join(sections)


def _yaml_scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value) if isinstance(value, list | dict) else str(value)
