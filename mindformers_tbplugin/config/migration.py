"""``mftb migrate``: a config that logs through MindFormers' built-in writer (the top-level
``tensorboard:`` section, or master's PyNative ``monitor.tensorboard``), the articles' ``type: TensorBoard``
or a SummaryCollector entry, rewritten with TensorBoardMonitor (+ HistogramMonitor) entries.

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

from mindformers_tbplugin.config import replacements
from mindformers_tbplugin.config.checker import CALLBACK_LISTS, UnreadableConfig, load_yaml
from mindformers_tbplugin.config.report import Finding
from mindformers_tbplugin.config.yaml_edits import Edit, Item, YamlText, child, one_line
from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.yaml_lines import line_of
from mindformers_tbplugin.yaml_lines import load as load_with_nodes

MONITOR, HISTOGRAMS, ALIAS = "TensorBoardMonitor", "HistogramMonitor", "TensorBoard"
ALIAS_KEYS = replacements.ALIAS_KEYS
# monitor_config (TrainingStateMonitor) outputs that go through the section's writer, by *_format key:
# what TensorBoardMonitor writes instead, or None (nothing yet).
STATE_OUTPUTS: dict[str, tuple[str, str | None]] = {
    "local_loss_format": ("the local loss of each micro batch", None),
    "device_local_loss_format": (
        "each device's local loss",
        "each rank's loss, per aggregation interval, in the ranks dashboard's loss channel, and the highest rank "
        "loss of every logged step in train/loss_max and train/loss_max_rank (several ranks, aggregate_every > 0)",
    ),
    "local_norm_format": (
        "each parameter's local gradient norm",
        "grad_norm/<layer> with runner_wrapper.local_norm: True (norm_groups: param for one per parameter)",
    ),
    "device_local_norm_format": ("each device's local gradient norm", None),
    "optimizer_state_format": (
        "the Adam moment norms of each parameter",
        "adam_m_norm/<layer> and adam_v_norm/<layer> every optimizer_state_every steps (norm_groups: param for "
        "one per parameter)",
    ),
    "max_attention_logit_format": (
        "the max attention logits",
        "attention_logit_max/<layer> and attention_logit_max/all every attention_logit_every steps (the format "
        "keeps MindFormers' tracking on; without it, set model.model_config.track_max_attention_logit: True)",
    ),
}
STABLE_RANK = "weight_stable_rank/<name> and weight_eigenvalue/<name>, the same tags"


@dataclass
class Migration:
    """The rewritten text and what became of each migrated setting (paths and lines of the original)."""

    source: Path
    original: str
    text: str
    changes: list[Finding] = field(default_factory=list)  # what was removed, replaced or added
    mapped: list[Finding] = field(default_factory=list)  # option -> its equivalent
    unmapped: list[Finding] = field(default_factory=list)  # options without one, and why
    notes: list[Finding] = field(default_factory=list)  # settings kept that limit what is written

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
        kinds = (
            ("", self.changes),
            ("mapped: ", self.mapped),
            ("no equivalent: ", self.unmapped),
            ("note: ", self.notes),
        )
        for label, findings in kinds:
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
        self.removed: list[str] = []  # paths of the sections removed (``tensorboard``, ``monitor.tensorboard``)
        entries = document.get("callbacks")
        monitors = [
            f"callbacks[{index}]"
            for index, entry in enumerate(entries if isinstance(entries, list) else [])
            if isinstance(entry, dict) and entry.get("type") in (MONITOR, ALIAS)
        ]
        self.monitor_at: str | None = monitors[0] if monitors else None  # the TensorBoardMonitor writing the runs

    def _finding(self, kind: str, path: str, message: str) -> None:
        getattr(self.result, kind).append(Finding(path, line_of(self.root, path), message))

    def run(self) -> Migration:
        for name in CALLBACK_LISTS:
            self._migrate_entries(name)
        for section in replacements.WRITER_SECTIONS:
            self._migrate_section(section)
        if not self.edits:
            raise UsageError(
                f"{self.path}: nothing to migrate: no tensorboard: or monitor.tensorboard section, no type: "
                "TensorBoard entry and no SummaryCollector entry (summary_collector:, type: SummaryCollector or "
                "SummaryMonitor)"
            )
        self._loss_parts()
        self.result.text = self.src.apply(self.edits)
        self._verify()
        return self.result

    def _verify(self) -> None:
        """The rewritten text must parse to the intended document: the original, migrated."""
        expected = copy.deepcopy(self.document)
        for path in self.removed:
            parent, name = path.rpartition(".")[::2]
            (expected.get(parent) if parent else expected).pop(name, None)
        for name, replaced in self.new_entries.items():
            old = expected.get(name) or []
            new = [new for index, entry in enumerate(old) for new in replaced.get(index, [entry])]
            expected[name] = (new + replaced.get(len(old), [])) or None  # every entry removed: the key stays, empty
        try:
            document = load_with_nodes(self.result.text)[0]
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

    # -- MindFormers' writer sections: tensorboard: and monitor.tensorboard -----------------------------
    def _section_pair(self, section: replacements.WriterSection) -> tuple[yaml.Node, yaml.Node] | None:
        node: yaml.Node | None = self.root
        pair = None
        for key in section.parts:
            pair = child(node, key)
            if pair is None:
                return None
            node = pair[1]
        return pair

    def _migrate_section(self, section: replacements.WriterSection) -> None:
        pair = self._section_pair(section)
        if pair is None:
            return
        parent = section.path.rpartition(".")[0]
        holder = self.document.get(parent) if parent else None
        if parent and isinstance(holder, dict) and len(holder) == 1:  # monitor: with nothing else goes too
            self.edits.append((*self.src.key_lines(*child(self.root, parent)), []))
            self.removed.append(parent)
            gone = f"removed (and {parent}:, which held nothing else)"
        else:
            self.edits.append((*self.src.key_lines(*pair), []))
            self.removed.append(section.path)
            gone = "removed"
        values = replacements.section_of(self.document, section)
        values = values if isinstance(values, dict) else {}
        folder = replacements.writer_dir(self.document, section, older_names=True)
        if folder is None:
            self._finding("changes", section.path, f"{gone}; it wrote nothing ({section.idle})")
            return
        self._finding("changes", section.path, f"{gone}: {section.label}")
        added = self.monitor_at is None
        monitor: dict[str, Any] = {"type": MONITOR, "log_dir": folder}
        folder_key = next(key for key in section.dir_keys if values.get(key) == folder)
        carried = {folder_key: "log_dir"}  # the section's keys carried over -> their option
        folder_node = (child(pair[1], folder_key) or (None, None))[1]
        written = [("type", MONITOR), ("log_dir", self.src.as_written(folder_node, folder))]
        key = next((key for key, option in self._options(section, values) if option == "log_every"), None)
        interval = values.get(key)
        if isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1:
            monitor["log_every"], carried[key] = interval, "log_every"
            aggregate_every = replacements.aggregate_every_for(interval)
            if aggregate_every is not None:
                monitor["aggregate_every"] = aggregate_every
        if section is replacements.BUILTIN:
            monitor.update(self._state_outputs(added))
        written += [(key, one_line(value)) for key, value in monitor.items() if key not in ("type", "log_dir")]
        if added:
            self._append_to_callbacks(monitor, written, f"replaces the {section.path}{'' if parent else ':'} section")
        self._section_findings(section, values, dict(written), carried if added else None)

    @staticmethod
    def _options(section: replacements.WriterSection, values: dict) -> list[tuple[str, str]]:
        """``(key, TensorBoardMonitor option)`` for the section's keys that have one, older names included."""
        return [
            (key, section.options[section.renamed.get(key, key)])
            for key in values
            if section.renamed.get(key, key) in section.options
        ]

    def _append_to_callbacks(self, monitor: dict, written: list[tuple[str, str]], comment: str) -> None:
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
            raise UsageError(f"{self.path}: callbacks (line {line_of(self.root, 'callbacks')}) is not a list")

    def _state_outputs(self, added: bool) -> dict[str, Any]:
        """List what monitor_config (TrainingStateMonitor) sent to the section's writer and what each became;
        the options that give its weight norm and throughput linearity, for a monitor being added."""
        config = self.document.get("monitor_config")
        if not isinstance(config, dict) or config.get("monitor_on") is False:
            return {}
        for key, (what, instead) in STATE_OUTPUTS.items():
            if not _writes_tensorboard(config.get(key)):
                continue
            where = f"monitor_config.{key}"
            if instead is None:
                why = "without the tensorboard: section MindFormers logs it instead"
                self._finding("unmapped", where, f"{what}: not written by {MONITOR}; {why}")
            else:
                self._finding("mapped", where, f"-> {instead} ({what})")
        options: dict[str, Any] = {}
        stable_rank = config.get("stable_rank_config")
        if isinstance(stable_rank, dict) and _writes_tensorboard(stable_rank.get("format")):
            options.update(self._stable_rank(stable_rank, added))
        baseline = config.get("throughput_baseline")
        if isinstance(baseline, (int, float)) and not isinstance(baseline, bool) and baseline > 0:
            options["throughput_baseline"] = baseline
            self._mapped_option(
                added,
                "monitor_config.throughput_baseline",
                "throughput_baseline",
                baseline,
                "perf/linearity, its throughput_linearity",
            )
        if _writes_tensorboard(config.get("weight_state_format")):
            step_interval = config.get("step_interval")
            every = step_interval if isinstance(step_interval, int) and step_interval >= 1 else 1
            options["param_norm_every"] = every
            what = "train/param_norm, the same L2 norm of the trainable parameters"
            self._mapped_option(added, "monitor_config.weight_state_format", "param_norm_every", every, what)
        return options if added else {}

    def _stable_rank(self, config: dict, added: bool) -> dict[str, Any]:
        """The options that give stable_rank_config's tags; its settings without one are listed."""
        where = "monitor_config.stable_rank_config"
        interval = config.get("step_interval", 100)
        every = interval if isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1 else 100
        options: dict[str, Any] = {"stable_rank_every": every}
        self._mapped_option(added, f"{where}.format", "stable_rank_every", every, STABLE_RANK)
        target = config.get("target")
        if isinstance(target, list) and target and all(isinstance(t, str) and t for t in target) and target != [".*"]:
            options["stable_rank_params"] = target
            self._mapped_option(added, f"{where}.target", "stable_rank_params", target, "the same regular expressions")
        mode = config.get("moe_show_mode")
        mode = mode[0] if isinstance(mode, list) and len(mode) == 1 else mode
        if mode in metrics.STABLE_RANK_EXPERT_VALUES and mode != "statistics":
            options["stable_rank_experts"] = mode
            self._mapped_option(added, f"{where}.moe_show_mode", "stable_rank_experts", mode, "3-D weights' values")
        if config.get("power_iteration_num") is not None:
            why = "not needed: the eigenvalue is iterated to a relative 1e-6 from the previous due step's vector"
            self._finding("unmapped", f"{where}.power_iteration_num", why)
        if config.get("do_aggregation"):
            why = "no equivalent: each weight's values are the writing rank's own shard's"
            self._finding("unmapped", f"{where}.do_aggregation", why)
        return options

    def _mapped_option(self, added: bool, where: str, option: str, value: Any, what: str) -> None:
        if added:
            self._finding("mapped", where, f"-> {option}: {value} ({what})")
        else:
            self._finding("mapped", where, f"-> {what}: set {option}: {value} on {self.monitor_at}")

    def _section_findings(
        self, section: replacements.WriterSection, values: dict, written: dict[str, str], carried: dict | None
    ) -> None:
        """What each key of the section became. ``written``: the new entry's options as YAML text;
        ``carried``: {key: option} of the keys carried into it (None: no entry added)."""
        options = dict(self._options(section, values))
        for key in values:
            where, current = f"{section.path}.{key}", section.renamed.get(key, key)
            renamed = (
                f" ({key}: MindFormers 2.0's name of {current}, which nothing wrote from)" if key != current else ""
            )
            option = options.get(key)
            if carried is not None and key in carried:
                becomes = f"-> {option}: {written[option]}"
                if option == "log_dir":
                    folder = values[key].rstrip("/")
                    becomes += f" (runs in {folder}/<experiment>_<timestamp>/: {section.runs})"
                self._finding("mapped", where, becomes + renamed)
            elif option and carried is not None:
                if option == "log_dir":
                    source = next(k for k, o in carried.items() if o == option)
                    why = f"not carried: log_dir is {written['log_dir']}, from {source}"
                else:
                    why = f"{values[key]!r} is not a number of steps; {option} keeps its default"
                self._finding("unmapped", where, why + renamed)
            elif option:
                hint = f"; add log_dir: {written['log_dir']} to it to keep this" if option == "log_dir" else ""
                self._finding("unmapped", where, f"not carried: {self.monitor_at} is a TensorBoardMonitor{hint}")
            elif current in section.always:
                self._finding("mapped", where, f"-> {section.always[current]}")
            elif current in section.none:
                self._finding("unmapped", where, section.none[current] + renamed)
            else:
                self._finding("unmapped", where, f"not a key of MindFormers' {section.path} section; removed with it")

    def _loss_parts(self) -> None:
        """What the top-level print_separate_loss (MindFormers' loss parts) becomes; it stays as written."""
        fate = replacements.loss_parts_fate(self.document)
        if fate is not None and self.monitor_at is not None:
            kind, message = fate
            self._finding(
                kind, replacements.LOSS_PARTS_KEY, f"kept as written: {message}" if kind == "notes" else message
            )
