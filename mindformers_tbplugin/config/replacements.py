"""Callback entries that write what TensorBoard cannot open, and the entries to write instead.

MindSpore's ``SummaryCollector`` (MindFormers registers it as ``SummaryMonitor``; articles also show
``- summary_collector: {...}``) writes MindInsight summary files: TensorBoard lists nothing for them.
"""

from __future__ import annotations

from typing import Any

import yaml

SUMMARY_TYPES = ("SummaryCollector", "SummaryMonitor")
SUMMARY_KEY = "summary_collector"
SUMMARY_DEFAULT_FREQ = 10  # SummaryCollector's collect_freq default


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
