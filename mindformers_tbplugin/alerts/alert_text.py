"""What a chat or mail message about an alert says: the rule, run, step and value, the incident's ranks,
layers and resume lines (alerts/incident.py), and a link to the run in the team's TensorBoard.

The link is built when a TensorBoard URL is configured (AlertMonitor's ``tensorboard_url``, ``mftb watch
--tensorboard-url``, or the environment variable ``MFTB_TENSORBOARD_URL``): TensorBoard's Time Series
tab with its run filter (a regular expression, ``?runFilter=``) set to the run.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from mindformers_tbplugin.alerts.delivery import Summary
from mindformers_tbplugin.alerts.record import Alert

TENSORBOARD_URL_ENV = "MFTB_TENSORBOARD_URL"


@dataclass(frozen=True)
class Text:
    """A message: a one-line title (a mail's subject) and its lines; ``link`` is also among the lines."""

    title: str
    lines: tuple[str, ...]
    link: str | None

    def plain(self) -> str:
        return "\n".join((self.title, *self.lines))


def tensorboard_url(configured: str | None) -> str | None:
    """The team's TensorBoard address: the configured one, else the environment's, else none."""
    return configured or os.environ.get(TENSORBOARD_URL_ENV) or None


def run_link(base: str | None, run: str) -> str | None:
    if not base:
        return None
    query = "?" + urllib.parse.urlencode({"runFilter": re.escape(run)}) if run else ""
    return f"{base.rstrip('/')}/{query}#timeseries"


def number(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):  # JSON spells NaN and infinities as strings
        return value
    value = float(value)
    return f"{value:.6g}" if math.isfinite(value) else str(value)


def alert_text(alert: Alert, tensorboard: str | None) -> Text:
    run = f" on run {alert.run}" if alert.run else ""
    title = f"[{alert.severity}] {alert.rule} on {alert.tag} at step {alert.step}{run}"
    baseline = "" if alert.baseline is None else f" (baseline {number(alert.baseline)})"
    lines = [
        f"rule: {alert.rule} ({alert.severity}, action {alert.action})",
        f"run: {alert.run or 'n/a'}",
        f"step: {alert.step}",
        f"tag: {alert.tag}",
        f"value: {number(alert.value)}{baseline}",
        alert.message,
        *_incident_lines(alert.incident or {}),
    ]
    link = run_link(tensorboard, alert.run)
    if link:
        lines.append(f"TensorBoard: {link}")
    return Text(title, tuple(lines), link)


def summary_text(summary: Summary, tensorboard: str | None) -> Text:
    first, last = summary.first, summary.last
    run = f" on run {summary.run}" if summary.run else ""
    steps = f"step {first.step}" if first.step == last.step else f"steps {first.step}-{last.step}"
    title = f"[{last.severity}] {summary.rule} fired {summary.count} more time(s){run} ({steps})"
    lines = [
        f"rule: {summary.rule}, {summary.count} firing(s) within {summary.seconds:g} s after the one already sent",
        f"run: {summary.run or 'n/a'}",
        f"{steps}; tags: {', '.join(summary.tags)}",
        f"last: value {number(last.value)} at step {last.step}: {last.message}",
    ]
    link = run_link(tensorboard, summary.run)
    if link:
        lines.append(f"TensorBoard: {link}")
    return Text(title, tuple(lines), link)


def _incident_lines(incident: dict[str, Any]) -> list[str]:
    lines = []
    ranks = incident.get("ranks") or []
    if ranks:
        shown = ", ".join(f"rank {entry['rank']} {number(entry['value'])}" for entry in ranks)
        lines.append(f"ranks by {incident.get('ranks_tag')}, highest first: {shown}")
    layers = incident.get("layers") or []
    if layers:
        shown = ", ".join(
            f"{entry['group']} {number(entry['grad_norm'])}"
            + ("" if entry.get("times_median") is None else f" ({entry['times_median']:.3g}x its median)")
            for entry in layers
        )
        lines.append(f"layers: {shown}")
    checkpoint = incident.get("checkpoint")
    if checkpoint:
        lines.append(f"last checkpoint before it: {checkpoint['path']} (step {checkpoint['step']})")
    if incident.get("resume"):
        lines.append("resume with:")
        lines += [f"    {line}" for line in incident["resume"]]
    if incident.get("resume_note"):
        lines.append(f"({incident['resume_note']})")
    return lines
