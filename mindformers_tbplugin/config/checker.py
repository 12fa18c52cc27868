"""Check the ``callbacks:`` and ``eval_callbacks:`` lists of a MindFormers YAML file, with line numbers.

Our entries are checked against the schema derived from the callback classes (unknown keys with a
suggestion, types, ranges, choices, the classes' cross-field hooks) plus rules that need the whole
file (two monitors writing one run folder). Other entries must name a class in MindFormers' callback
registry; mindformers is imported only when such an entry exists. Every problem is collected, each
naming its YAML path and line. Warnings flag settings that are legal but likely wrong.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import yaml

from mindformers_tbplugin.config import effective_options, replacements
from mindformers_tbplugin.config.effective_options import apply_team_defaults
from mindformers_tbplugin.config.report import Finding, Report, quiet_output
from mindformers_tbplugin.errors import FrameworkImportError
from mindformers_tbplugin.framework.config_hooks import is_pynative_training
from mindformers_tbplugin.registration.team_defaults import Completion
from mindformers_tbplugin.schema import check_entry, did_you_mean, params_of
from mindformers_tbplugin.tfevents import run_folders
from mindformers_tbplugin.yaml_lines import line_of
from mindformers_tbplugin.yaml_lines import load as load_with_nodes

CALLBACK_LISTS = ("callbacks", "eval_callbacks")
# Keys MindFormers itself reads from any entry: the registry name and its module-loading route.
COMMON_KEYS = ("type", "auto_register")
# Optional classmethod of a callback: (arguments) -> [Problem] that are notes, e.g. what an alias's keys became.
NOTES_HOOK = "config_notes"
# Optional classmethod of a callback: (arguments) -> [Problem] that are warnings (legal, likely wrong).
WARNINGS_HOOK = "config_warnings"
# Above this many parameters, per-step histograms cost a noticeable share of a step.
LARGE_MODEL_PARAMETERS = 1e9
# The monitor class (and its subclasses) that MindFormers' built-in tensorboard: section duplicates.
MONITOR_CLASS = "TensorBoardMonitor"


class UnreadableConfig(Exception):
    """The file is missing, not text, empty or not YAML. The message says which and where."""


# -- reading ----------------------------------------------------------------------------------------
def load_yaml(path: Path) -> tuple[Any, yaml.Node]:
    """The document and its node tree (for line numbers). Raises UnreadableConfig."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UnreadableConfig(f"file not found: {path}") from None
    except IsADirectoryError:
        raise UnreadableConfig(f"{path} is a folder, not a YAML file") from None
    except OSError as exc:
        raise UnreadableConfig(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise UnreadableConfig(f"{path} is a binary file (it contains NUL bytes), not YAML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableConfig(
            f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        document, node = load_with_nodes(text)
    except yaml.MarkedYAMLError as exc:
        raise UnreadableConfig(f"YAML syntax error {_yaml_error_text(exc)}") from None
    except yaml.YAMLError as exc:
        raise UnreadableConfig(f"YAML error: {exc}") from None
    if node is None or document is None:
        raise UnreadableConfig(f"{path} is empty: expected a MindFormers config (a YAML mapping)")
    return document, node


def _yaml_error_text(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"(line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    text = f"{where}: {exc.problem or exc.context}"
    if exc.context and exc.problem and exc.context_mark:
        text += f" ({exc.context} at line {exc.context_mark.line + 1})"
    return text


# -- MindFormers' registry (imported only for entries that are not ours) ----------------------------
def registered_callbacks() -> dict[str, type]:
    """MindFormers' callback registry (ours included once mindformers has loaded)."""
    from mindformers_tbplugin.framework.mindformers_api import registered

    with quiet_output():
        import mindformers_tbplugin.registration.mindformers_registry  # noqa: F401  (ours too, whatever the environment)
    return registered("CALLBACK")


# -- checking ---------------------------------------------------------------------------------------
def _unknown_key_message(key: Any, owner: str, allowed: list[str]) -> str:
    hint = did_you_mean(key, allowed)
    return f"unknown key '{key}' for {owner}; {hint + ' ' if hint else ''}allowed: {', '.join(allowed)}"


class _Checker:
    """Walks one document, collecting findings into a Report."""

    def __init__(
        self, report: Report, document: dict, root: yaml.Node, ours: dict[str, type], completion: Completion | None
    ) -> None:
        self.report, self.document, self.root, self.ours = report, document, root, ours
        self.completion = completion  # what the team defaults gave: its findings name that file's line
        self.run_folders: dict[tuple[Path, str], str] = {}

    def finding(self, path: str, message: str) -> Finding:
        source = self.completion.source_of(path) if self.completion else None
        return Finding(path, line_of(self.root, path), message, source or "")

    def error(self, path: str, message: str, unusable: bool = False) -> None:
        self.report.errors.append(self.finding(path, message))
        self.report.unusable = self.report.unusable or unusable

    def warn(self, path: str, message: str) -> None:
        self.report.warnings.append(self.finding(path, message))

    def note(self, path: str, message: str) -> None:
        self.report.notes.append(self.finding(path, message))

    def run(self) -> None:
        foreign = []
        for list_name in CALLBACK_LISTS:
            entries = self.document.get(list_name)
            if entries is None:
                continue
            if not isinstance(entries, list):
                self.error(
                    list_name,
                    f"expected a list of callback entries ('- type: ...'), got {_kind(entries)}",
                    unusable=True,
                )
                continue
            for index, entry in enumerate(entries):
                where = f"{list_name}[{index}]"
                if not isinstance(entry, dict):
                    self.error(where, f"expected a mapping with a 'type' key, got {_kind(entry)}", unusable=True)
                elif (settings := replacements.summary_settings(entry)) is not None:
                    self.report.entries_checked += 1
                    self.error(where, replacements.summary_replacement_message(settings))
                elif "type" not in entry:
                    self.error(where, "entry has no 'type' key (the callback class name)", unusable=True)
                elif not isinstance(entry["type"], str) or not entry["type"]:
                    self.error(f"{where}.type", f"expected a class name, got {entry['type']!r}", unusable=True)
                elif entry["type"] in self.ours:
                    self.report.entries_checked += 1
                    self.check_ours(where, self.ours[entry["type"]], entry)
                else:
                    self.report.entries_checked += 1
                    foreign.append((where, entry))
        monitor = self.monitor_at()
        if monitor is not None:
            self.warn_builtin_writers(monitor)
            self.note_loss_parts()
        if foreign:
            self.check_foreign(foreign)

    def monitor_at(self) -> str | None:
        """The path of the first TensorBoardMonitor (or subclass) in callbacks:, if any."""
        entries = self.document.get("callbacks")
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            name = entry.get("type") if isinstance(entry, dict) else None
            cls = self.ours.get(name) if isinstance(name, str) else None
            if cls is not None and MONITOR_CLASS in {c.__name__ for c in cls.__mro__}:
                return f"callbacks[{index}]"
        return None

    def warn_builtin_writers(self, monitor: str) -> None:
        """MindFormers' own TensorBoard writer on besides our monitor at ``monitor``: both write, both cost."""
        for section in replacements.WRITER_SECTIONS:
            folder = replacements.writer_dir(self.document, section)
            if folder is not None:
                self.warn(section.path, replacements.writer_message(section, folder, monitor))

    def note_loss_parts(self) -> None:
        """An mcore config whose print_separate_loss turns off the loss parts our monitor would write."""
        fate = replacements.loss_parts_fate(self.document)
        if fate is not None and fate[0] == "notes":
            self.note(replacements.LOSS_PARTS_KEY, fate[1])

    def check_ours(self, where: str, cls: type, entry: dict) -> None:
        params = {p.name: p for p in params_of(cls)}
        arguments = {}
        for key, value in entry.items():
            if key in COMMON_KEYS:
                continue
            if key in params:
                arguments[key] = value
            else:
                self.error(f"{where}.{key}", _unknown_key_message(key, cls.__name__, [*params, *COMMON_KEYS]))
        for param in params.values():
            if param.required and param.name not in arguments:
                self.error(where, f"missing required key '{param.name}' ({param.type_name()}) for {cls.__name__}")
        problems = check_entry(cls, arguments)
        for problem in problems:
            self.error(f"{where}.{problem.key}" if problem.key else where, problem.message)
        if not problems:
            self.warn_likely_mistakes(where, cls, {p.name: p.default for p in params.values()} | arguments)
            warnings = getattr(cls, WARNINGS_HOOK, None)
            for warning in warnings(arguments) if warnings else ():
                self.warn(f"{where}.{warning.key}", warning.message)
            notes = getattr(cls, NOTES_HOOK, None)
            for note in notes(arguments) if notes else ():
                self.note(f"{where}.{note.key}", note.message)
            self.note_idle_layer_norm_options(where, arguments)

    def note_idle_layer_norm_options(self, where: str, arguments: dict) -> None:
        """Per-layer norm options written while per-layer gradient norms are off: the classic trainer's wrapper
        does not return them (``runner_wrapper.local_norm``), or a config of MindFormers 2.x's PyNative
        trainer asks for them neither with ``layer_grad_norms`` nor with its ``monitor.train_state.local_norm``."""
        wrapper = self.document.get("runner_wrapper")
        if isinstance(wrapper, dict) and wrapper.get("local_norm") is True:
            return
        pynative = is_pynative_training(self.document)
        monitor = self.document.get("monitor")
        train_state = monitor.get("train_state") if isinstance(monitor, dict) else None
        if pynative and (
            arguments.get("layer_grad_norms") is True
            or (isinstance(train_state, dict) and train_state.get("local_norm"))
        ):
            return
        hint = (
            "add 'layer_grad_norms: true' to this entry (MindFormers 2.x's PyNative trainer)"
            if pynative
            else "add 'local_norm: True' under runner_wrapper"
        )
        for key in ("norm_groups", "grad_hist_every"):
            if key in arguments:
                self.note(f"{where}.{key}", f"takes effect only with per-layer gradient norms: {hint}")
        if not pynative and arguments.get("layer_grad_norms") is True:
            self.note(
                f"{where}.layer_grad_norms",
                "the classic trainer computes per-layer gradient norms only with 'local_norm: True' under "
                "runner_wrapper; this option turns them on under MindFormers 2.x's PyNative trainer",
            )

    def warn_likely_mistakes(self, where: str, cls: type, arguments: dict) -> None:
        if "log_dir" in arguments:
            self.check_log_dir(where, arguments["log_dir"])
            if "experiment" in arguments and "run_name_pattern" in arguments:
                self.check_run_folder(where, cls, arguments)
        if arguments.get("aggregate_every") == 1:
            self.warn(
                f"{where}.aggregate_every",
                "1 runs a cross-rank collective after every step; 10 or more keeps the cost negligible",
            )
        every = arguments.get("every_steps")
        parameters = model_parameter_count(self.document)
        if "histogram" in cls.__name__.lower() and every == 1 and parameters >= LARGE_MODEL_PARAMETERS:
            self.warn(
                f"{where}.every_steps",
                f"histograms of every parameter after every step on a model of ~{parameters / 1e9:.1f}B "
                "parameters slow training noticeably; every 100 steps or more is usual",
            )
        if "histogram" in cls.__name__.lower():
            self.warn_if_never_due(where, arguments.get("every_steps") or 0, arguments.get("every_epochs") or 0)

    def warn_if_never_due(self, where: str, every_steps: int, every_epochs: int) -> None:
        """Histograms whose schedules never come due in the configured training (said again at train start)."""
        epochs, steps = training_length(self.document)
        silent = []
        if every_steps and steps is not None and every_steps > steps:
            silent.append(f"every_steps {every_steps}, and the training runs about {steps} steps")
        if every_epochs and epochs is not None and every_epochs > epochs:
            silent.append(f"every_epochs {every_epochs}, and the training runs {epochs} epoch(s)")
        if silent and len(silent) == bool(every_steps) + bool(every_epochs):
            self.warn(where, f"no histogram would be written: {'; '.join(silent)}")

    def check_log_dir(self, where: str, log_dir: str | None) -> None:
        """Say where the runs will go (a note: nothing to change), and warn only when they cannot."""
        resolved = run_folders.log_root(log_dir)
        if log_dir:
            path, origin = f"{where}.log_dir", "log_dir"
            if not os.path.isabs(os.path.expanduser(log_dir)):
                origin = f"log_dir '{log_dir}' from the working directory {Path.cwd()}"
        elif os.environ.get(run_folders.LOG_DIR_ENV, "").strip():
            path, origin = where, f"the launcher's folder {run_folders.LOG_DIR_ENV}, as this entry sets no log_dir"
        else:
            path, origin = where, f"the default {run_folders.DEFAULT_LOG_DIR} from the working directory {Path.cwd()}"
        self.note(path, f"runs go to {resolved} ({origin})")
        if resolved not in self.report.log_dirs:
            self.report.log_dirs.append(resolved)
        if run_folders.is_non_ascii(resolved):
            self.warn(path, f"{resolved} contains non-ASCII characters; some TensorBoard versions mishandle them")
        existing = next(p for p in (resolved, *resolved.parents) if p.exists())
        if not existing.is_dir():
            self.warn(path, f"{existing} exists and is not a folder, so {resolved} cannot be created on this machine")
        elif not os.access(existing, os.W_OK | os.X_OK):
            self.warn(path, f"{existing} is not writable here, so {resolved} cannot be created on this machine")

    def check_run_folder(self, where: str, cls: type, arguments: dict) -> None:
        if run_folders.unknown_run_name_fields(arguments["run_name_pattern"]):
            return
        name = arguments["run_name_pattern"].format(
            experiment=arguments["experiment"], timestamp="{timestamp}", rank="{rank}"
        )
        folder = (run_folders.log_root(arguments["log_dir"]), name)
        first = self.run_folders.setdefault(folder, where)
        if first != where:
            self.error(
                where,
                f"{cls.__name__} writes the same run folder as {first} ({folder[0] / name}), every tag "
                "twice; give one of them a different log_dir or experiment",
            )

    def check_foreign(self, foreign: list[tuple[str, dict]]) -> None:
        try:
            registry = registered_callbacks()
        except FrameworkImportError:  # installed but broken: the environment cannot train, say so and stop
            raise
        except Exception as exc:  # mindformers missing: the rest of the report still stands
            for where, entry in foreign:
                self.warn(f"{where}.type", f"cannot check '{entry['type']}': importing mindformers failed ({exc!r})")
            return
        for where, entry in foreign:
            name = entry["type"]
            if name in registry:
                self.check_foreign_keys(where, registry[name], entry)
            elif "auto_register" not in entry:  # with auto_register MindFormers imports the class itself
                hint = did_you_mean(name, [*registry, *self.ours]) or f"registered: {', '.join(sorted(registry))}"
                self.error(f"{where}.type", f"unknown callback type '{name}'; {hint}")

    def check_foreign_keys(self, where: str, cls: type, entry: dict) -> None:
        try:
            parameters = inspect.signature(cls).parameters
        except (TypeError, ValueError):
            return
        if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return  # takes any keyword: nothing to check
        allowed = [name for name, p in parameters.items() if p.kind is not p.VAR_POSITIONAL]
        for key in entry:
            if key not in COMMON_KEYS and key not in allowed:
                self.error(f"{where}.{key}", _unknown_key_message(key, cls.__name__, [*allowed, *COMMON_KEYS]))


def _kind(value: Any) -> str:
    """``a mapping``, ``a string ('x')``: how a wrong value is named in messages."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    return f"{names.get(type(value), 'a ' + type(value).__name__)} ({value!r})"


def model_parameter_count(document: dict) -> float:
    """Rough decoder parameter count from ``model.model_config`` (0 when the sizes are not given)."""
    model = document.get("model")
    config = model.get("model_config") if isinstance(model, dict) else None
    if not isinstance(config, dict):
        return 0.0
    layers = config.get("num_layers", config.get("num_hidden_layers"))  # legacy, mcore spelling
    hidden, vocab = config.get("hidden_size"), config.get("vocab_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (hidden, layers, vocab)):
        return 0.0
    return 12.0 * layers * hidden * hidden + 2.0 * vocab * hidden


def training_length(document: dict) -> tuple[int | None, int | None]:
    """``runner_config.epochs`` and, when the dataset says how many samples it holds, about how many
    steps the training runs (samples / global batch x epochs); None where the config does not say."""

    def number(path: str) -> int | None:
        node: Any = document
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, int) and not isinstance(node, bool) and node > 0 else None

    epochs = number("runner_config.epochs")
    samples, batch = number("train_dataset.data_loader.num_samples"), number("runner_config.batch_size")
    if epochs is None or samples is None or batch is None:
        return epochs, None
    replicas = number("parallel_config.data_parallel") or 1
    micro = number("parallel_config.micro_batch_num") if (number("parallel_config.pipeline_stage") or 1) > 1 else 1
    accumulation = number("runner_config.gradient_accumulation_steps") or 1
    return epochs, epochs * samples // (batch * replicas * (micro or 1) * accumulation)


def check_file(
    path: str | Path, ours: dict[str, type] | None = None, team_defaults: bool = True, effective: bool = False
) -> Report:
    """Check one config file as a training would get it: completed from the team's defaults file
    (``MFTB_DEFAULTS``) unless ``team_defaults`` is False. ``ours`` defaults to every callback this package
    exports. The report lists every option of our entries and where it came from when the defaults file
    gave some, or with ``effective``."""
    path = Path(path)
    report = Report(path)
    try:
        document, root = load_yaml(path)
    except UnreadableConfig as exc:
        report.errors.append(Finding("", None, str(exc)))
        report.unusable = True
        return report
    if not isinstance(document, dict):
        report.errors.append(Finding("", 1, f"expected a YAML mapping at the top level, got {_kind(document)}"))
        report.unusable = True
        return report
    if ours is None:
        from mindformers_tbplugin.registration.catalog import our_callbacks

        ours = our_callbacks()
    completion = apply_team_defaults(report, document, root, ours) if team_defaults else None
    if report.unusable:
        return report
    _Checker(report, document, root, ours, completion).run()
    if effective or completion is not None:
        report.effective = effective_options.render(document, root, ours, completion)
    return report
