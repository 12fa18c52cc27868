"""``mftb migrate``: a config that logs through MindFormers' built-in writer (the top-level
``tensorboard:`` section), the articles' ``type: TensorBoard`` or a SummaryCollector entry, rewritten
with TensorBoardMonitor (+ HistogramMonitor) entries.

Only the lines of what is migrated change (``yaml_edits``); every other line stays byte for byte. The
rewritten text is parsed again and must equal the intended document, or nothing is written.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mindformers_tbplugin.config import replacements, yaml_lines
from mindformers_tbplugin.config.checker import CALLBACK_LISTS, UnreadableConfig, load_yaml
from mindformers_tbplugin.config.report import Finding
from mindformers_tbplugin.config.yaml_edits import Edit, Item, YamlText, child, one_line
from mindformers_tbplugin.errors import UsageError

MONITOR, HISTOGRAMS, ALIAS = "TensorBoardMonitor", "HistogramMonitor", "TensorBoard"
ALIAS_KEYS = replacements.ALIAS_KEYS
# monitor_config (TrainingStateMonitor) outputs that go through the section's writer, by *_format key.
STATE_OUTPUTS = {
    "local_loss_format": "the local loss of each micro batch",
    "device_local_loss_format": "each device's local loss",
    "local_norm_format": "each parameter's local gradient norm",
    "device_local_norm_format": "each device's local gradient norm",
    "optimizer_state_format": "the Adam moment norms of each parameter",
    "max_attention_logit_format": "the max attention logits",
}


@dataclass
class Migration:
    """The rewritten text and what became of each migrated setting (paths and lines of the original)."""

    source: Path
    original: str
    text: str
    changes: list[Finding] = field(default_factory=list)  # what was removed, replaced or added
    mapped: list[Finding] = field(default_factory=list)  # option -> its equivalent
    unmapped: list[Finding] = field(default_factory=list)  # options without one, and why

    def diff(self) -> str:
        """The unified diff from the original to the rewritten file."""
        lines = difflib.unified_diff(
            self.original.splitlines(keepends=True),
            self.text.splitlines(keepends=True),
            fromfile=str(self.source),
            tofile=f"{self.source} (migrated)",
        )
        return "".join(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines)

    def render(self) -> str:
        """What was migrated, what each option became and what has no equivalent."""
        lines = [f"{self.source}: migrated"]
        for label, findings in (("", self.changes), ("mapped: ", self.mapped), ("no equivalent: ", self.unmapped)):
            lines += [f"  {label}{f.render()}" for f in sorted(findings, key=lambda f: f.line or 0)]
        return "\n".join(lines)


def migrate_file(path: str | Path) -> Migration:
    """Read and migrate one config. Raises UsageError for a file that cannot be migrated."""
    path = Path(path)
    try:
        document, root = load_yaml(path)
    except UnreadableConfig as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(document, dict) or not isinstance(root, yaml.MappingNode):
        raise UsageError(f"{path}: expected a MindFormers config (a YAML mapping at the top level)")
    return _Migrator(path, path.read_bytes().decode("utf-8"), document, root).run()


def _writes_tensorboard(output_format: Any) -> bool:
    """Whether a TrainingStateMonitor ``*_format`` value sends its metric to the section's writer."""
    return output_format == "tensorboard" or (isinstance(output_format, list) and "tensorboard" in output_format)


class _Migrator:
    def __init__(self, path: Path, text: str, document: dict, root: yaml.MappingNode) -> None:
        self.path, self.document, self.root = path, document, root
        self.src = YamlText(text, str(path))
        self.result = Migration(path, text, text)
        self.edits: list[Edit] = []  # (first line, end line, new lines) of the original
        self.new_entries: dict[str, dict[int, list[dict]]] = {}  # list -> {index: the entries replacing it}
        entries = document.get("callbacks")
        monitors = [
            f"callbacks[{index}]"
            for index, entry in enumerate(entries if isinstance(entries, list) else [])
            if isinstance(entry, dict) and entry.get("type") in (MONITOR, ALIAS)
        ]
        self.monitor_at: str | None = monitors[0] if monitors else None  # the TensorBoardMonitor writing the runs

    def _finding(self, kind: str, path: str, message: str) -> None:
        getattr(self.result, kind).append(Finding(path, yaml_lines.line_of(self.root, path), message))

    def run(self) -> Migration:
        for name in CALLBACK_LISTS:
            self._migrate_entries(name)
        self._migrate_section()
        if not self.edits:
            raise UsageError(
                f"{self.path}: nothing to migrate: no tensorboard: section, no type: TensorBoard entry and no "
                "SummaryCollector entry (summary_collector:, type: SummaryCollector or SummaryMonitor)"
            )
        self.result.text = self.src.apply(self.edits)
        self._verify()
        return self.result

    def _verify(self) -> None:
        """The rewritten text must parse to the intended document: the original, migrated."""
        expected = copy.deepcopy(self.document)
        expected.pop(replacements.BUILTIN_SECTION, None)
        for name, replaced in self.new_entries.items():
            old = expected.get(name) or []
            new = [new for index, entry in enumerate(old) for new in replaced.get(index, [entry])]
            expected[name] = (new + replaced.get(len(old), [])) or None  # every entry removed: the key stays, empty
        try:
            document = yaml_lines.load(self.result.text)[0]
        except yaml.YAMLError:
            document = None
        if document != expected:
            raise UsageError(
                f"{self.path}: its layout defeats a line-by-line rewrite (the result would not be the intended "
                "config), so nothing was written; edit it by hand (`mftb validate` lists the entries to write)"
            )

    # -- callbacks: and eval_callbacks: entries ------------------------------------------------------
    def _migrate_entries(self, name: str) -> None:
        pair, entries = child(self.root, name), self.document.get(name)
        if pair is None or not isinstance(entries, list) or not isinstance(pair[1], yaml.SequenceNode):
            return
        for index, (entry, node) in enumerate(zip(entries, pair[1].value, strict=False)):
            if not isinstance(entry, dict):
                continue
            where = f"{name}[{index}]"
            settings = replacements.summary_settings(entry)
            if settings is not None:
                self._replace_summary(name, index, where, settings, node, self.src.item(pair, index))
            elif entry.get("type") == ALIAS:
                self._replace_alias(name, index, where, entry, node, self.src.item(pair, index))

    def _replace_summary(self, name: str, index: int, where: str, settings: dict, node: yaml.Node, item: Item) -> None:
        nested = "type" not in self.document[name][index]  # - summary_collector: {...}
        options = (child(node, replacements.SUMMARY_KEY) or (None, None))[1] if nested else node
        base = f"{where}.{replacements.SUMMARY_KEY}" if nested else where
        new = replacements.replacement_entries(settings)
        carried = name == "callbacks" and self.monitor_at is None
        if carried:
            self.monitor_at = where
        else:
            new = new[1:]  # a TensorBoardMonitor already writes the runs
        summary_dir = (child(options, "summary_dir") or (None, None))[1]
        rendered = [
            [(k, self.src.as_written(summary_dir, v) if k == "log_dir" else one_line(v)) for k, v in entry.items()]
            for entry in new
        ]
        self.edits.append((item.first, item.last + 1, self.src.render(rendered, item)))
        self.new_entries.setdefault(name, {})[index] = new
        listing = " + ".join(entry["type"] for entry in new) or f"nothing ({self.monitor_at} writes the runs)"
        self._finding("changes", where, f"SummaryCollector entry replaced by {listing}")
        mapped, unmapped = replacements.summary_option_fates(settings)
        elsewhere = f"{self.monitor_at} is a TensorBoardMonitor" if self.monitor_at else f"{MONITOR} goes in callbacks:"
        for key, becomes in mapped.items():
            if not carried and key in ("summary_dir", "collect_freq"):
                self._finding("unmapped", f"{base}.{key}", f"not carried: {elsewhere}")
            else:
                self._finding("mapped", f"{base}.{key}", f"-> {becomes}")
        for key, why in unmapped.items():
            self._finding("unmapped", f"{base}.{key}", why)

    def _replace_alias(self, name: str, index: int, where: str, entry: dict, node: yaml.Node, item: Item) -> None:
        kept = {key: value for key, value in entry.items() if key not in ALIAS_KEYS}
        kept["type"] = MONITOR
        every = entry.get("histogram_interval")
        histograms = {"type": HISTOGRAMS, "every_steps": 0, "every_epochs": every}
        if isinstance(node, yaml.MappingNode) and not node.flow_style:
            lines = self.src.entry_lines(node, item, ALIAS_KEYS, MONITOR)
        else:
            lines = self.src.render([[(key, one_line(value)) for key, value in kept.items()]], item)
        if every:
            lines += self.src.render([[(key, one_line(value)) for key, value in histograms.items()]], item)
        self.edits.append((item.first, item.last + 1, lines))
        self.new_entries.setdefault(name, {})[index] = [kept, histograms] if every else [kept]
        self._finding("changes", f"{where}.type", f"type: TensorBoard -> {MONITOR}, its other keys kept as they are")
        notes = dict(replacements.alias_notes(entry))
        for key in (key for key in ALIAS_KEYS if key in entry):
            if key == "histogram_interval" and every:
                self._finding("mapped", f"{where}.{key}", f"-> a {HISTOGRAMS} entry after it, every_epochs: {every}")
            else:
                self._finding("unmapped", f"{where}.{key}", notes.get(key, f"{key}: {entry[key]!r} -> nothing"))

    # -- the tensorboard: section ------------------------------------------------------------------
    def _migrate_section(self) -> None:
        name = replacements.BUILTIN_SECTION
        pair = child(self.root, name)
        if pair is None:
            return
        self.edits.append((*self.src.key_lines(*pair), []))
        section = self.document.get(name) if isinstance(self.document.get(name), dict) else {}
        folder = replacements.builtin_writer_dir(self.document)
        if folder is None:
            self._finding("changes", name, "removed; it wrote nothing (no tensorboard_dir, or tensorboard_on: false)")
            return
        self._finding("changes", name, "removed: MindFormers' built-in writer (tensorboardX, a folder per rank)")
        added = self.monitor_at is None
        monitor: dict[str, Any] = {"type": MONITOR, "log_dir": folder}
        folder_node = (child(pair[1], "tensorboard_dir") or (None, None))[1]
        written = [("type", MONITOR), ("log_dir", self.src.as_written(folder_node, folder))]
        interval = section.get("tensorboard_log_interval")
        if isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1:
            monitor["log_every"] = interval
            aggregate_every = replacements.aggregate_every_for(interval)
            if aggregate_every is not None:
                monitor["aggregate_every"] = aggregate_every
        param_norm_every = self._state_outputs(added)
        if param_norm_every is not None:
            monitor["param_norm_every"] = param_norm_every
        written += [(key, one_line(value)) for key, value in monitor.items() if key not in ("type", "log_dir")]
        if added:
            self._append_to_callbacks(monitor, written)
        self._section_findings(section, dict(written), monitor if added else None)

    def _append_to_callbacks(self, monitor: dict, written: list[tuple[str, str]]) -> None:
        comment = "replaces the tensorboard: section"
        pair, entries = child(self.root, "callbacks"), self.document.get("callbacks")
        self.monitor_at = f"callbacks[{len(entries) if isinstance(entries, list) else 0}]"
        self.new_entries.setdefault("callbacks", {})[len(entries) if isinstance(entries, list) else 0] = [monitor]
        self._finding("changes", "callbacks", f"{MONITOR} added at {self.monitor_at}, in place of the section")
        newline = self.src.newline
        if pair is None:  # no callbacks: key: a new list at the end of the file
            lines = [] if self.src.text.endswith("\n") else [newline]
            lines += [f"callbacks:{newline}", *self.src.render([written], Item(0, 0, 2, 4), comment)]
            self.edits.append((len(self.src.lines), len(self.src.lines), lines))
        elif entries is None or entries == []:  # callbacks: with nothing, or []
            key, value = pair
            first = self.src.line_at(key.start_mark.index)
            column = self.src.indent(first)
            lines = [f"{' ' * column}callbacks:{newline}"]
            lines += self.src.render([written], Item(0, 0, column + 2, column + 4), comment)
            self.edits.append((first, self.src.last_line(value, key.end_mark.index) + 1, lines))
        elif isinstance(entries, list):
            at = self.src.end_of_list(pair)
            self.edits.append((at, at, self.src.render([written], self.src.item(pair, 0), comment)))
        else:
            raise UsageError(
                f"{self.path}: callbacks (line {yaml_lines.line_of(self.root, 'callbacks')}) is not a list"
            )

    def _state_outputs(self, added: bool) -> int | None:
        """List what monitor_config (TrainingStateMonitor) sent to the section's writer; the
        param_norm_every that gives its weight norm, when a monitor is added."""
        config = self.document.get("monitor_config")
        if not isinstance(config, dict) or config.get("monitor_on") is False:
            return None
        for key, what in STATE_OUTPUTS.items():
            if _writes_tensorboard(config.get(key)):
                self._finding(
                    "unmapped",
                    f"monitor_config.{key}",
                    f"{what}: not written by {MONITOR}; without the tensorboard: section MindFormers logs it instead",
                )
        if config.get("throughput_baseline") is not None:
            self._finding(
                "unmapped",
                "monitor_config.throughput_baseline",
                "throughput_linearity: without the tensorboard: section only in MindFormers' log; "
                "perf/samples_per_s is the throughput it divides by this baseline",
            )
        if not _writes_tensorboard(config.get("weight_state_format")):
            return None
        step_interval = config.get("step_interval")
        every = step_interval if isinstance(step_interval, int) and step_interval >= 1 else 1
        where, what = (
            "monitor_config.weight_state_format",
            "train/param_norm, the same L2 norm of the trainable parameters",
        )
        if added:
            self._finding("mapped", where, f"-> param_norm_every: {every} ({what})")
            return every
        self._finding("mapped", where, f"-> {what}: set param_norm_every: {every} on {self.monitor_at}")
        return None

    def _section_findings(self, section: dict, written: dict[str, str], monitor: dict | None) -> None:
        """What each key of the section became. ``written``: the options as YAML text; ``monitor``: the
        entry added for the section (None: none added)."""
        for key in section:
            where = f"{replacements.BUILTIN_SECTION}.{key}"
            option = replacements.BUILTIN_OPTIONS.get(key)
            if option and monitor is not None and option in monitor:
                becomes = f"-> {option}: {written[option]}"
                if key == "tensorboard_dir":
                    runs = f"{monitor[option].rstrip('/')}/<experiment>_<timestamp>/"
                    becomes += f" (runs in {runs}: one for the job, not per rank)"
                self._finding("mapped", where, becomes)
            elif option and monitor is not None:
                self._finding(
                    "unmapped", where, f"{section[key]!r} is not a number of steps; {option} keeps its default"
                )
            elif option:
                hint = f"; add log_dir: {written['log_dir']} to it to keep this" if key == "tensorboard_dir" else ""
                self._finding("unmapped", where, f"not carried: {self.monitor_at} is a TensorBoardMonitor{hint}")
            elif key in replacements.BUILTIN_ALWAYS:
                self._finding("mapped", where, f"-> {replacements.BUILTIN_ALWAYS[key]}")
            elif key in replacements.BUILTIN_NONE:
                self._finding("unmapped", where, replacements.BUILTIN_NONE[key])
            else:
                self._finding("unmapped", where, "not a key of MindFormers' tensorboard: section; removed with it")
