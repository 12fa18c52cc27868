"""The team's defaults file: our callback entries that every training of an environment gets.

``MFTB_DEFAULTS`` names a YAML file holding a ``callbacks:`` list of TensorBoardMonitor, HistogramMonitor
and AlertMonitor entries, at most one of each. A training config (classic or PyNative, whatever starts it)
is completed from it before MindFormers builds anything:

* a config whose callbacks name none of ours gets every entry of the file;
* each entry of ours it does name gets the file's value of every option it leaves unset (an entry of a
  subclass, ``type: TensorBoard``, takes TensorBoardMonitor's): what the config says always wins.

``MFTB_DEFAULTS=`` (empty) or a top-level ``mftb_defaults: false`` in the config turns it off for one job.
The file is checked whole, by the callbacks' own schema, before anything is added: a missing, unreadable
or invalid file, an unknown option or a bad value raises :class:`DefaultsError` naming the file and line,
and no training starts with a half-applied file. Standard library, PyYAML and the schema only: the hook
that calls :func:`complete_at_load` runs inside MindFormers' config loading.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mindformers_tbplugin.log import logger
from mindformers_tbplugin.schema import ConfigError, Problem, check_entry, did_you_mean, params_of
from mindformers_tbplugin.yaml_lines import line_of
from mindformers_tbplugin.yaml_lines import load as load_with_nodes

DEFAULTS_ENV = "MFTB_DEFAULTS"
OFF_KEY = "mftb_defaults"  # top-level config key: false turns the team defaults off for this config
TYPES = ("TensorBoardMonitor", "HistogramMonitor", "AlertMonitor")
LIST = "callbacks"


class DefaultsError(ConfigError):
    """The defaults file cannot be used; the message names the file and the line of every problem."""


@dataclass(frozen=True)
class DefaultsEntry:
    """One entry of the file: its type, its options and the line of each."""

    type: str
    options: dict[str, Any]
    lines: dict[str, int]
    line: int


@dataclass(frozen=True)
class TeamDefaults:
    path: Path
    entries: tuple[DefaultsEntry, ...]


@dataclass
class Completion:
    """What one config received: entries added whole, and options filled into its own entries."""

    defaults: TeamDefaults
    added: dict[int, DefaultsEntry] = field(default_factory=dict)  # callbacks index -> the file's entry
    filled: dict[int, dict[str, int]] = field(default_factory=dict)  # callbacks index -> {option: file line}

    def line_of(self, index: int, option: str | None = None) -> int | None:
        """The file's line of an option (or of an added entry) that came from it, else None."""
        if index in self.added:
            entry = self.added[index]
            return entry.lines.get(option, entry.line) if option else entry.line
        return self.filled.get(index, {}).get(option) if option else None

    def source_of(self, path: str) -> str | None:
        """``FILE line N`` for a config path (``callbacks[2].rules[0].k``) whose value came from the file."""
        match = re.match(rf"{LIST}\[(\d+)\](?:\.(\w+))?", path)
        line = self.line_of(int(match.group(1)), match.group(2)) if match else None
        return None if line is None else f"{self.defaults.path} line {line}"

    def summary(self) -> str:
        """One line for the training's log and ``mftb validate``'s notes."""
        parts = [f"added {entry.type} (line {entry.line})" for entry in self.added.values()]
        filled = [
            f"{LIST}[{index}].{option} (line {line})"
            for index, options in sorted(self.filled.items())
            for option, line in options.items()
        ]
        parts += [f"filled {', '.join(filled)}"] if filled else []
        said = "; ".join(parts) if parts else "nothing taken: the config sets every option the file gives"
        return f"team defaults {self.defaults.path} ({DEFAULTS_ENV}): {said}"


# -- the file -----------------------------------------------------------------------------------------
def defaults_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The file ``MFTB_DEFAULTS`` names (relative to the working directory), or None when unset or empty."""
    value = environ.get(DEFAULTS_ENV, "").strip()
    return Path(value).expanduser().absolute() if value else None


def load(path: Path, ours: Mapping[str, type]) -> TeamDefaults:
    """The file, checked whole. Raises DefaultsError listing every problem with its line."""
    document, root = _read(path)
    problems: list[tuple[int | None, str]] = []
    if not isinstance(document, dict):
        raise _error(path, [(1, f"expected a mapping with a '{LIST}:' list of entries, got {_kind(document)}")])
    for key in document:
        if key != LIST:
            problems.append((line_of(root, str(key)), f"unknown key '{key}'; allowed: {LIST}"))
    items = document.get(LIST) or []
    if not isinstance(items, list):
        problems.append(
            (line_of(root, LIST), f"{LIST}: expected a list of entries ('- type: ...'), got {_kind(items)}")
        )
        items = []
    entries: list[DefaultsEntry] = []
    for index, item in enumerate(items):
        where = f"{LIST}[{index}]"
        entry = _entry(root, where, item, ours, problems)
        if entry is None:
            continue
        if any(e.type == entry.type for e in entries):
            problems.append((entry.line, f"{where}: a second {entry.type}; the file gives at most one of each type"))
        entries.append(entry)
    if problems:
        raise _error(path, problems)
    return TeamDefaults(path, tuple(entries))


def _entry(
    root: yaml.Node, where: str, item: Any, ours: Mapping[str, type], problems: list[tuple[int | None, str]]
) -> DefaultsEntry | None:
    line = line_of(root, where) or 1
    kind = item.get("type") if isinstance(item, dict) else None
    if not isinstance(item, dict) or kind not in TYPES:
        got = f"type {kind!r}" if isinstance(item, dict) else _kind(item)
        hint = did_you_mean(kind, TYPES) if isinstance(kind, str) else None
        problems.append(
            (line, f"{where}: expected an entry of type {', '.join(TYPES)}, got {got}{'; ' + hint if hint else ''}")
        )
        return None
    cls = ours[kind]
    params = [p.name for p in params_of(cls)]
    options = {key: value for key, value in item.items() if key != "type"}
    for key in options:
        if key not in params:
            hint = did_you_mean(key, params)
            message = f"unknown key '{key}' for {kind}; {hint + ' ' if hint else ''}allowed: {', '.join(params)}"
            problems.append((line_of(root, f"{where}.{key}"), f"{where}.{key}: {message}"))
    for problem in check_entry(cls, {key: value for key, value in options.items() if key in params}):
        path = f"{where}.{problem.key}" if problem.key else where
        problems.append((line_of(root, path), f"{path}: {problem.message}"))
    lines = {key: line_of(root, f"{where}.{key}") or line for key in options}
    return DefaultsEntry(kind, options, lines, line)


def _read(path: Path) -> tuple[Any, yaml.Node | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _error(path, [(None, "file not found")]) from None
    except IsADirectoryError:
        raise _error(path, [(None, "is a folder, not a YAML file")]) from None
    except UnicodeDecodeError as exc:
        raise _error(path, [(None, f"not UTF-8 text (byte offset {exc.start})")]) from None
    except OSError as exc:
        raise _error(path, [(None, f"cannot be read: {exc.strerror or exc}")]) from None
    try:
        document, node = load_with_nodes(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _error(
            path, [(mark.line + 1 if mark else None, f"YAML syntax error: {exc.problem or exc.context}")]
        ) from None
    except yaml.YAMLError as exc:
        raise _error(path, [(None, f"YAML error: {exc}")]) from None
    if document is None:
        raise _error(path, [(None, f"is empty: expected a '{LIST}:' list of {', '.join(TYPES)} entries")])
    return document, node


def _error(path: Path, problems: list[tuple[int | None, str]]) -> DefaultsError:
    lines = "\n".join(f"    - {path}{f':{line}' if line else ''}: {message}" for line, message in problems)
    return DefaultsError(
        f"the team defaults file {path} ({DEFAULTS_ENV}) cannot be used, so no training starts with it "
        f"(set {DEFAULTS_ENV}= to train without it):\n{lines}",
        [Problem("", message) for _, message in problems],
    )


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "nothing (null)" if value is None else f"{type(value).__name__} {value!r}"


# -- a config -----------------------------------------------------------------------------------------
def switched_on(document: Mapping[str, Any]) -> bool:
    """False when the config says ``mftb_defaults: false``. Raises ConfigError for another value."""
    value = document.get(OFF_KEY, True)
    if not isinstance(value, bool):
        reason = f"expected true or false (false: no team defaults for this config), got {value!r}"
        raise ConfigError(f"{OFF_KEY}: {reason}", [Problem(OFF_KEY, reason)])
    return value


def ours_in(entries: list, ours: Mapping[str, type]) -> list[tuple[int, type]]:
    """``(index, class)`` of the entries of ours in a callbacks list."""
    found = []
    for index, entry in enumerate(entries):
        name = entry.get("type") if isinstance(entry, dict) else None
        if isinstance(name, str) and name in ours:
            found.append((index, ours[name]))
    return found


def complete(document: dict, defaults: TeamDefaults, ours: Mapping[str, type]) -> Completion:
    """Add the file's entries to ``document`` (none of ours in it), or fill its entries' unset options."""
    completion = Completion(defaults)
    entries = document.get(LIST)
    if entries is None:
        entries = document[LIST] = []
    if not isinstance(entries, list):
        return completion  # the config's own mistake, reported by whoever reads it
    present = ours_in(entries, ours)
    if not present:
        for entry in defaults.entries:
            completion.added[len(entries)] = entry
            entries.append({"type": entry.type, **copy.deepcopy(entry.options)})
        return completion
    for index, cls in present:
        for entry in defaults.entries:
            if not issubclass(cls, ours[entry.type]):
                continue
            for option, value in entry.options.items():
                if option not in entries[index]:
                    entries[index][option] = copy.deepcopy(value)
                    completion.filled.setdefault(index, {})[option] = entry.lines[option]
    return completion


def broken_by_defaults(document: dict, completion: Completion, ours: Mapping[str, type]) -> list[str]:
    """The problems of entries that pass the schema as the config wrote them and fail once completed."""
    problems = []
    for index, filled in completion.filled.items():
        entry = document[LIST][index]
        cls = ours[entry["type"]]
        params = {p.name for p in params_of(cls)}
        merged = {key: value for key, value in entry.items() if key in params}
        own = {key: value for key, value in merged.items() if key not in filled}
        if check_entry(cls, own):
            continue  # the config's own mistake: reported as before
        for problem in check_entry(cls, merged):
            path = f"{LIST}[{index}]" + (f".{problem.key}" if problem.key else "")
            source = completion.source_of(path) or "the config"
            problems.append(f"{path} ({source}): {problem.message}")
    return problems


def complete_from_environment(
    document: dict, ours: Mapping[str, type], environ: Mapping[str, str] = os.environ
) -> Completion | None:
    """A training config completed from the file ``MFTB_DEFAULTS`` names, unless off; the off key is
    removed (MindFormers warns of keys it does not use). Raises ConfigError (DefaultsError for the file)."""
    on = switched_on(document)
    document.pop(OFF_KEY, None)
    path = defaults_path(environ)
    if path is None or not on:
        return None
    defaults = load(path, ours)
    completion = complete(document, defaults, ours)
    problems = broken_by_defaults(document, completion, ours)
    if problems:
        lines = "\n".join(f"    - {problem}" for problem in problems)
        raise DefaultsError(f"the team defaults file {path} ({DEFAULTS_ENV}) makes this config invalid:\n{lines}")
    return completion


def complete_at_load(document: dict) -> None:
    """What MindFormers' loading of a training config runs first (framework/config_hooks.py): the team's
    entries, or the process ends with status 2 and the problem, as ``mftb`` reports a config error."""
    from mindformers_tbplugin.registration.catalog import our_callbacks

    try:
        completion = complete_from_environment(document, our_callbacks())
    except ConfigError as exc:
        print(f"mindformers_tbplugin: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if completion is not None:
        logger.info("%s", completion.summary())
