"""Other ways of logging for TensorBoard, and the entries to write instead.

MindSpore's ``SummaryCollector`` (MindFormers registers it as ``SummaryMonitor``; articles also show
``- summary_collector: {...}``) writes MindInsight summary files: TensorBoard lists nothing for them.
MindFormers' built-in writer (the top-level ``tensorboard:`` section) writes tensorboardX files, one
folder per rank, at a cost on every step; MindFormers master's PyNative trainer has its own
(``monitor.tensorboard``), written from the last rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

SUMMARY_TYPES = ("SummaryCollector", "SummaryMonitor")
SUMMARY_KEY = "summary_collector"
SUMMARY_DEFAULT_FREQ = 10  # SummaryCollector's collect_freq default
# TensorBoardMonitor's aggregate_every default, known here without importing the callbacks (which
# need MindSpore); tests/config/test_replacements.py checks it against the class.
MONITOR_AGGREGATE_EVERY = 10


def summary_settings(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The SummaryCollector arguments of a summary entry, or None when ``entry`` is not one."""
    if entry.get("type") in SUMMARY_TYPES:
        return {key: value for key, value in entry.items() if key != "type"}
    if "type" not in entry and SUMMARY_KEY in entry:
        settings = entry[SUMMARY_KEY]
        return dict(settings) if isinstance(settings, dict) else {}
    return None


def collects_parameters(settings: dict[str, Any]) -> bool:
    """Whether the collector wrote parameter histograms: by default it does (the first five
    parameters); ``collect_specified_data.histogram_regular`` chooses them, and without the default
    action only that setting collects any."""
    specified = settings.get("collect_specified_data")
    specified = specified if isinstance(specified, dict) else {}
    if "histogram_regular" in specified:
        return bool(specified["histogram_regular"]) or settings.get("keep_default_action", True) is not False
    return settings.get("keep_default_action", True) is not False


def replacement_entries(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The TensorBoardMonitor (+ HistogramMonitor) entries that log what the collector did."""
    frequency = settings.get("collect_freq", SUMMARY_DEFAULT_FREQ)
    if not isinstance(frequency, int) or isinstance(frequency, bool) or frequency < 1:
        frequency = SUMMARY_DEFAULT_FREQ
    monitor: dict[str, Any] = {"type": "TensorBoardMonitor"}
    if isinstance(settings.get("summary_dir"), str) and settings["summary_dir"].strip():
        monitor["log_dir"] = settings["summary_dir"]
    monitor["log_every"] = frequency
    aggregate_every = aggregate_every_for(frequency)
    if aggregate_every is not None:
        monitor["aggregate_every"] = aggregate_every
    entries = [monitor]
    if collects_parameters(settings):
        tensor_frequency = settings.get("collect_tensor_freq")
        every = tensor_frequency if isinstance(tensor_frequency, int) and tensor_frequency >= 1 else frequency
        entries.append({"type": "HistogramMonitor", "every_steps": every})
    return entries


def summary_replacement_message(settings: dict[str, Any]) -> str:
    """Why the entry is refused and the exact YAML to put in its place."""
    text = yaml.safe_dump(replacement_entries(settings), sort_keys=False, default_flow_style=False)
    listing = "\n".join(f"      {line}" for line in text.rstrip().splitlines())
    return (
        "SummaryCollector writes MindInsight summary files, which TensorBoard cannot open (it shows no runs); "
        f"replace this entry with:\n{listing}"
    )


# SummaryCollector arguments that replacement_entries() carries over, and what they become.
SUMMARY_MAPPED = {
    "summary_dir": "TensorBoardMonitor log_dir",
    "collect_freq": "TensorBoardMonitor log_every",
    "collect_tensor_freq": "HistogramMonitor every_steps",
    "keep_default_action": "whether a HistogramMonitor is written (parameter histograms)",
}
# collect_specified_data keys whose data TensorBoardMonitor writes by default.
SUMMARY_COVERED = {
    "collect_metric": "train/loss is always written",
    "collect_graph": "log_graph (on by default) writes the cell graph",
    "collect_train_lineage": "log_hparams and log_config (on by default) write the hyperparameters and the config",
    "collect_eval_lineage": "log_eval (on by default) writes the evaluation results",
}


def summary_option_fates(settings: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """``({key: what it becomes}, {key: why it has no equivalent})`` for a SummaryCollector's arguments;
    keys inside ``collect_specified_data`` are written ``collect_specified_data.<key>``."""
    mapped: dict[str, str] = {}
    unmapped: dict[str, str] = {}
    for key, value in settings.items():
        if key in SUMMARY_MAPPED:
            mapped[key] = SUMMARY_MAPPED[key]
        elif key == "collect_specified_data" and isinstance(value, dict):
            for inner in value:
                name = f"{key}.{inner}"
                if inner in SUMMARY_COVERED:
                    mapped[name] = SUMMARY_COVERED[inner]
                elif inner == "histogram_regular":
                    unmapped[name] = (
                        "a regular expression; HistogramMonitor's include takes shell-style patterns "
                        "(e.g. '*attention*'): write them yourself"
                    )
                else:
                    unmapped[name] = "no TensorBoardMonitor equivalent (MindInsight only)"
        else:
            unmapped[key] = "no TensorBoardMonitor equivalent (MindInsight only)"
    return mapped, unmapped


def aggregate_every_for(log_every: int) -> int | None:
    """An ``aggregate_every`` for a monitor writing every ``log_every`` steps: None when the default
    already is a multiple of it, else the smallest multiple of ``log_every`` from the default up."""
    if MONITOR_AGGREGATE_EVERY % log_every == 0:
        return None
    return -(-MONITOR_AGGREGATE_EVERY // log_every) * log_every


# -- the articles' ``type: TensorBoard`` ------------------------------------------------------------
# Its keys beyond TensorBoardMonitor's options (tests/config/test_replacements.py checks them against the class).
ALIAS_KEYS = ("histogram_interval", "update_time", "profile")


def alias_notes(arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key, what it became)`` for the articles' keys of a ``type: TensorBoard`` entry."""
    notes = [("type", "TensorBoard is the articles' spelling of TensorBoardMonitor")]
    if arguments.get("log_dir") is not None:
        notes.append(("log_dir", "log_dir -> TensorBoardMonitor log_dir"))
    every = arguments.get("histogram_interval")
    if every:
        histograms = f"parameter histograms every {every} epoch(s) (HistogramMonitor every_epochs)"
        notes.append(("histogram_interval", f"histogram_interval: {every} -> {histograms}"))
    elif every is not None:
        notes.append(("histogram_interval", f"histogram_interval: {every} -> no parameter histograms"))
    if arguments.get("update_time") is not None:
        notes.append(
            (
                "update_time",
                "update_time ignored: it is how often the viewer reloads; use "
                f"`mftb tensorboard LOGDIR --reload_interval {arguments['update_time']:g}`",
            )
        )
    if arguments.get("profile") is not None:
        notes.append(("profile", "profile ignored: profiling is MindSpore's Profiler, not these logs"))
    return notes


# -- MindFormers' TensorBoard writers: the top-level ``tensorboard:`` section and ``monitor.tensorboard`` -
_QUEUE_SIZE = (
    "tensorboardX's write-out threshold; TensorBoardMonitor's writer thread never holds up a step "
    "and writes out every flush_secs (5 s)"
)
EXPERT_LOAD = (
    "always written in MoE models, every moe_every steps (default 10; 0 turns it off): moe/load, the moe "
    "dashboard's layer x expert load (for expert_load/<router>'s ep_<i> runs), and per layer "
    "moe/<layer>/max_violation, min_load, dead_experts and bias_range"
)


@dataclass(frozen=True)
class WriterSection:
    """One of MindFormers' TensorBoard writer sections and what each of its keys becomes."""

    path: str  # its YAML path
    label: str  # how messages name its writer
    dir_keys: tuple[str, ...]  # the folder key; then older names of it, which MindFormers did not write from
    options: dict[str, str]  # key -> the TensorBoardMonitor option it becomes
    always: dict[str, str]  # key -> what TensorBoardMonitor always writes in its place
    none: dict[str, str]  # key -> why it has no equivalent
    idle: str  # why a section without a folder wrote nothing
    runs: str  # how TensorBoardMonitor's runs differ from its folder
    renamed: dict[str, str] = field(default_factory=dict)  # older key names -> the current ones

    @property
    def parts(self) -> tuple[str, ...]:
        """The keys from the top of the document down to the section."""
        return tuple(self.path.split("."))


BUILTIN_SECTION = "tensorboard"
# Section keys with a TensorBoardMonitor option.
BUILTIN_OPTIONS = {"tensorboard_dir": "log_dir", "tensorboard_log_interval": "log_every"}
# Section keys whose scalars TensorBoardMonitor always writes: nothing to set.
BUILTIN_ALWAYS = {
    "log_loss_scale_to_tensorboard": "always written: train/loss_scale and train/overflow",
    "log_timers_to_tensorboard": (
        "always written: perf/step_time_ms, perf/samples_per_s and perf/tokens_per_s "
        "(its B-samples-per-day is perf/samples_per_s x 86400 / 1e9)"
    ),
    "log_expert_load_to_tensorboard": EXPERT_LOAD,
    "tensorboard_on": "TensorBoardMonitor is on by being in callbacks:",
}
# Section keys without an equivalent, and why.
BUILTIN_NONE = {"tensorboard_queue_size": _QUEUE_SIZE}
BUILTIN = WriterSection(
    path=BUILTIN_SECTION,
    label="MindFormers' built-in writer (tensorboardX, a folder per rank)",
    dir_keys=("tensorboard_dir",),
    options=BUILTIN_OPTIONS,
    always=BUILTIN_ALWAYS,
    none=BUILTIN_NONE,
    idle="no tensorboard_dir, or tensorboard_on: false",
    runs="one for the job, not per rank",
)
# MindFormers master's PyNative trainer: mindformers/pynative/config/config.py (TensorboardConfig) and
# pynative/tools/monitor.py (TensorboardMonitor). MindFormers 1.9 and 2.0 declared the same keys with
# a tensorboard_ prefix and wrote nothing from them.
PYNATIVE = WriterSection(
    path="monitor.tensorboard",
    label="MindFormers' PyNative writer (tensorboardX, from the last rank)",
    dir_keys=("output_dir", "tensorboard_dir"),
    options={"output_dir": "log_dir", "log_interval": "log_every"},
    always={},
    none={"queue_size": _QUEUE_SIZE},
    idle="output_dir empty or missing",
    runs="a run folder per training",
    renamed={
        "tensorboard_dir": "output_dir",
        "tensorboard_log_interval": "log_interval",
        "tensorboard_queue_size": "queue_size",
    },
)
WRITER_SECTIONS = (BUILTIN, PYNATIVE)
# What removing the section saves: BENCHMARKS.md, "End-to-end step time" (tiny LLaMA, CPU, 1 rank),
# median ms per step without any TensorBoard writer, with the section, and the slowdowns (%) of the
# section and of TensorBoardMonitor. tests/config/test_replacements.py checks them against BENCHMARKS.md.
BUILTIN_COST = {"baseline_ms": 19.07, "section_ms": 21.27, "section_pct": 18.20, "monitor_pct": -5.88}


def section_of(document: dict[str, Any], section: WriterSection) -> Any:
    """The section's value in ``document`` (None when it has none)."""
    node: Any = document
    for key in section.parts:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def writer_dir(document: dict[str, Any], section: WriterSection, older_names: bool = False) -> str | None:
    """The folder the section's writer wrote to (a non-empty string, and not ``tensorboard_on: false``),
    else None. ``older_names``: also a folder under an older name of the key, which nothing wrote to."""
    values = section_of(document, section)
    if not isinstance(values, dict) or values.get("tensorboard_on") is False:
        return None
    for key in section.dir_keys if older_names else section.dir_keys[:1]:
        folder = values.get(key)
        if isinstance(folder, str) and folder.strip():
            return folder
    return None


def writer_message(section: WriterSection, folder: str, monitor: str) -> str:
    """``mftb validate``'s warning when the section writes besides a TensorBoardMonitor at ``monitor``.
    Only the top-level section's cost was measured (BENCHMARKS.md)."""
    if section is not BUILTIN:
        return (
            f"MindFormers' PyNative TensorBoard writer is on ({section.path}.output_dir: {folder}) besides the "
            f"TensorBoardMonitor at {monitor}: both write, tensorboardX into {folder} from the last rank and the "
            "monitor its run, the same loss, learning rate and gradient norm twice. "
            "`mftb migrate CONFIG` removes it and says what each of its options becomes"
        )
    cost = BUILTIN_COST
    return (
        f"MindFormers' built-in tensorboard: section is on (tensorboard_dir: {folder}) besides the "
        f"TensorBoardMonitor at {monitor}: both write, tensorboardX into {folder.rstrip('/')}/rank_<id> on every "
        "rank and the monitor its run. Removing the section saves its writer's time at every step: in "
        f"BENCHMARKS.md it made the tiny LLaMA's steps {cost['section_pct']:.2f}% longer ({cost['section_ms']:.2f} "
        f"against {cost['baseline_ms']:.2f} ms; TensorBoardMonitor: {cost['monitor_pct']:+.2f}%). "
        "`mftb migrate CONFIG` removes it and says what each of its options becomes"
    )


# -- MindFormers' loss parts: the top-level print_separate_loss (mcore models) ---------------------
# MindFormers' train wrapper registers its lm_loss, mtp_loss, aux_loss and indexer_loss accumulators only
# while print_separate_loss is true (its default) and the model is not a legacy one (use_legacy: False).
LOSS_PARTS_KEY = "print_separate_loss"
LOSS_PARTS = "train/loss_lm, train/loss_mtp, train/loss_aux and train/loss_indexer"


def loss_parts_fate(document: dict[str, Any]) -> tuple[str, str] | None:
    """``(kind, message)`` for a top-level print_separate_loss: ``mapped``, ``notes`` (it is off in an
    mcore config) or ``unmapped`` (a legacy model); None when the config has none."""
    if LOSS_PARTS_KEY not in document:
        return None
    if document.get("use_legacy", True) is not False:
        return "unmapped", "legacy models (use_legacy not False) have no loss parts; MindFormers ignores it"
    value = document[LOSS_PARTS_KEY]
    if value:  # MindFormers takes any true value (bool(print_separate_loss and not use_legacy))
        return "mapped", (
            f"-> {LOSS_PARTS}: MindFormers' lm-loss, mtp-loss, load-balancing-loss and indexer-loss, each as its "
            "contribution to train/loss"
        )
    return "notes", (
        f"{value!r} turns off MindFormers' loss-part accumulation (its train wrapper registers the lm_loss, "
        "mtp_loss, aux_loss and indexer_loss accumulators only while it is True, its default), so "
        f"TensorBoardMonitor cannot write {LOSS_PARTS}; remove it or set it to True to have them"
    )
