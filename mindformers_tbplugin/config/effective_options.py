"""``mftb validate`` and the team defaults: whether a config takes the file ``MFTB_DEFAULTS`` names, and
every option of our entries with where its value comes from: the config's line, the defaults file's line,
or the built-in default."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import yaml

from mindformers_tbplugin.config.report import Finding, Report
from mindformers_tbplugin.framework.config_hooks import is_classic_training, is_pynative_training
from mindformers_tbplugin.framework.running_config import MASK, is_secret_key
from mindformers_tbplugin.registration import team_defaults
from mindformers_tbplugin.registration.team_defaults import DEFAULTS_ENV, LIST, OFF_KEY, Completion
from mindformers_tbplugin.schema import ConfigError, params_of
from mindformers_tbplugin.yaml_lines import line_of

WIDTH = 110  # characters per line of the options block


def apply_team_defaults(report: Report, document: dict, root: yaml.Node, ours: Mapping[str, type]) -> Completion | None:
    """Complete ``document`` as a training would be completed, saying so in ``report``: a note of what it
    took, an error for a defaults file that cannot be used (the report is then unusable: exit status 2)."""
    off_line = line_of(root, OFF_KEY)
    try:
        on = team_defaults.switched_on(document)
    except ConfigError as exc:
        report.errors.append(Finding(OFF_KEY, off_line, exc.problems[0].message))
        return None
    path = team_defaults.defaults_path()
    if path is None:
        return None
    if not on:
        report.notes.append(
            Finding(OFF_KEY, off_line, f"the team defaults {path} ({DEFAULTS_ENV}) are off for this config")
        )
        return None
    if not (is_classic_training(document) or is_pynative_training(document)):
        run_mode = document.get("run_mode")
        message = (
            f"the team defaults {path} ({DEFAULTS_ENV}) complete training configs only (run_mode train or "
            f"finetune, or a PyNative trainer config); this one has run_mode {run_mode!r}"
        )
        report.notes.append(Finding("run_mode", line_of(root, "run_mode"), message))
        return None
    try:
        defaults = team_defaults.load(path, ours)
    except ConfigError as exc:
        report.errors.append(Finding("", None, str(exc)))
        report.unusable = True
        return None
    completion = team_defaults.complete(document, defaults, ours)
    report.notes.append(Finding("", None, completion.summary()))
    return completion


def render(document: dict, root: yaml.Node, ours: Mapping[str, type], completion: Completion | None) -> list[str]:
    """The report's block: per entry of ours, its options from the config, from the defaults file, built in."""
    entries = document.get(LIST)
    lines: list[str] = []
    for index, cls in team_defaults.ours_in(entries if isinstance(entries, list) else [], ours):
        entry, where = entries[index], f"{LIST}[{index}]"
        given, team, built_in = [], [], []
        for param in params_of(cls):
            line = completion.line_of(index, param.name) if completion else None
            if param.name in entry and line is not None:
                team.append(f"{param.name} {_show(entry[param.name])} (line {line})")
            elif param.name in entry:
                own = line_of(root, f"{where}.{param.name}")
                given.append(f"{param.name} {_show(entry[param.name])}" + (f" (line {own})" if own else ""))
            else:
                built_in.append(f"{param.name} {_show(param.default)}")
        added = completion.line_of(index) if completion and index in completion.added else None
        origin = f"added from {completion.defaults.path} line {added}" if added else f"line {line_of(root, where)}"
        lines.append(f"  options of {where} {entry['type']} ({origin}):")
        source = f"from the team defaults {completion.defaults.path}" if completion else ""
        for label, items in (("from the config", given), (source, team), ("built-in defaults", built_in)):
            if items:
                lines += _packed(f"{label}: ", items)
    return lines


def _show(value: Any) -> str:
    """A value as YAML users read it (null, true, "text", [1, 2]), with what may be a secret masked."""
    return json.dumps(_masked(value), ensure_ascii=False, default=str)


def _masked(value: Any, key: str = "") -> Any:
    """Values of secret-looking keys masked, and URLs cut to their host: a webhook's path and query are
    its token (the launcher's output, where this block goes, often ends in a job's log)."""
    if isinstance(value, Mapping):
        return {k: MASK if is_secret_key(str(k)) and v else _masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(item) for item in value]
    if isinstance(value, str) and "://" in value:
        parts = urllib.parse.urlsplit(value)
        hidden = "/***" if parts.path.strip("/") or parts.query or parts.username else ""
        return f"{parts.scheme}://{parts.hostname or ''}{hidden}"
    return value


def _packed(label: str, items: list[str]) -> list[str]:
    """``label`` then the items, comma-separated, over lines of at most WIDTH characters (an item is never cut)."""
    lines, current = [], "    " + label
    for number, item in enumerate(items):
        text = item + ("," if number < len(items) - 1 else "")
        if len(current) + 1 + len(text) > WIDTH and current.strip() != label.strip():
            lines.append(current)
            current = "      " + text
        else:
            current = f"{current}{'' if current.endswith(': ') else ' '}{text}"
    return [*lines, current]
