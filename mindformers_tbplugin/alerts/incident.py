"""An alert's incident: which ranks, which layers, the step's optimizer state, and how to resume past it.

Every alert AlertMonitor reports carries one (``Alert.incident``, in the JSON of the jsonl and webhook
sinks, and as Markdown under ``alerts/incident`` in the Text tab):

* ``ranks``: each data-parallel rank's ``train/loss`` at the alert's step, highest first (the top
  TOP_RANKS), from the cross-rank all-reduce that already carries them; a single process: its own;
  ``mftb watch``, which reads only the event files: the highest rank (``train/loss_max_rank``);
* ``layers``: the gradient groups that stand out most against their recent median at that step
  (per-layer gradient norms on), as the gradient alerts' messages name them;
* ``samples``: ``[{rank, indices}]``, the dataset rows each of those ranks read at that step, from
  MindFormers' and MindSpore's sharding of an unshuffled MindDataset (framework/data_rows.py); null
  with ``samples_unknown`` saying why when the order cannot be known (a shuffled dataset, ...);
* ``checkpoint``: the last checkpoint saved before the step, and ``resume``: the YAML lines that resume
  from it and skip the data up to and including the alert's step (the classic trainer's
  ``data_skip_steps``); ``resume_note``: what those lines cannot do, when so (MindFormers 2.x's PyNative
  trainer has no key that skips data) (framework/checkpoints.py);
* ``lr``, ``grad_norm``, ``loss_scale`` written at that step (null when not written);
* what the rule that fired knows itself (``baseline_divergence``: ``first_divergent_step``, ``compared``
  and the window's mean errors).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mindformers_tbplugin.alerts.culprits import GradientCulprits, gradient_groups
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.framework.checkpoints import CallbackCheckpoints, Checkpoints
from mindformers_tbplugin.framework.data_rows import DataOrder
from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.run import Run

TOP_RANKS = 8
KEPT_STEPS = 64  # logged steps whose written values an incident can look back on
INCIDENT_TAG = "alerts/incident"  # text: the incident as Markdown


class IncidentRecorder:
    """The values written at recent steps, merged per step (a multi-rank job writes a step's model values
    at once and its data values at the next aggregation), and the incident of an alert."""

    def __init__(
        self,
        run: Run,
        culprits: GradientCulprits,
        checkpoints: Checkpoints | None = None,
        data: DataOrder | None = None,
    ) -> None:
        """``checkpoints``: where the training saves (None: nowhere known)."""
        self._run = run
        self._data = data or DataOrder("the training's data order is not known")
        self._culprits = culprits
        self._checkpoints = checkpoints or CallbackCheckpoints([], None)
        self._written: OrderedDict[int, dict[str, float]] = OrderedDict()
        self._warn_once = WarnOnce()

    def remember(self, step: int, values: Mapping[str, float]) -> None:
        """On the training thread, every written step: a dict merge."""
        kept = self._written.get(step)
        (self._new_step(step) if kept is None else kept).update(values)

    def remember_value(self, step: int, tag: str, value: float) -> None:
        """One point (``mftb watch`` reads them one by one)."""
        kept = self._written.get(step)
        (self._new_step(step) if kept is None else kept)[tag] = value

    def _new_step(self, step: int) -> dict[str, float]:
        kept = self._written[step] = {}
        if len(self._written) > KEPT_STEPS:
            self._written.popitem(last=False)
        return kept

    def written(self, step: int) -> Mapping[str, float]:
        """The values remembered for ``step`` (empty when none)."""
        return self._written.get(step, {})

    def attach(self, alert: Alert) -> Alert:
        """The alert with its incident; unchanged (one warning) if building it failed: alerting goes on."""
        try:
            return replace(alert, incident={**self.incident(alert), **(alert.incident or {})})
        except Exception as exc:  # an unreadable checkpoint folder, an unexpected value
            self._warn_once("incident", f"AlertMonitor: no incident for {alert.rule} at step {alert.step}: {exc!r}")
            return alert

    def incident(self, alert: Alert) -> dict[str, Any]:
        written = self._written.get(alert.step, {})
        saved = self._checkpoints.last_saved_before(alert.step)
        resume = None if saved is None else self._checkpoints.resume(saved, alert.step)
        ranks = self._ranks(alert.step, written)
        samples = self._samples(alert.step, [entry["rank"] for entry in ranks])
        return {
            "step": alert.step,
            "ranks": ranks,
            "ranks_tag": metrics.TRAIN_LOSS,
            "layers": self._layers(written),
            "samples": samples,
            "samples_unknown": None if samples is not None else self._data.unknown or "no rank to name",
            "checkpoint": None if saved is None else {"step": saved.step, "path": str(saved.path)},
            "resume": None if resume is None else resume.lines,
            "resume_note": None if resume is None else resume.note,
            "lr": _number(written.get(metrics.TRAIN_LR)),
            "grad_norm": _number(written.get(metrics.TRAIN_GRAD_NORM)),
            "loss_scale": _number(written.get(metrics.TRAIN_LOSS_SCALE)),
        }

    def _ranks(self, step: int, written: Mapping[str, float]) -> list[dict[str, Any]]:
        losses = self._run.rank_losses_at(step)
        if losses is None:
            rank, highest = written.get(metrics.TRAIN_LOSS_MAX_RANK), written.get(metrics.TRAIN_LOSS_MAX)
            if rank is not None and highest is not None:  # the written values only (mftb watch): the highest
                return [{"rank": int(rank), "value": _number(highest)}]
            loss = written.get(metrics.TRAIN_LOSS)  # a single process (or no aggregation): this rank's
            return [] if loss is None else [{"rank": 0, "value": _number(loss)}]
        held = [(rank, value) for rank, value in enumerate(losses.tolist()) if value != -math.inf]  # -inf: none
        held.sort(key=lambda item: math.inf if math.isnan(item[1]) else item[1], reverse=True)
        return [{"rank": rank, "value": _number(value)} for rank, value in held[:TOP_RANKS]]

    def _samples(self, step: int, ranks: list[int]) -> list[dict[str, Any]] | None:
        found = [{"rank": rank, "indices": self._data.rows(rank, step)} for rank in ranks]
        return found if found and all(entry["indices"] is not None for entry in found) else None

    def _layers(self, written: Mapping[str, float]) -> list[dict[str, Any]]:
        groups = gradient_groups(written)
        return [
            {"group": group, "grad_norm": _number(value), "times_median": None if ratio is None else round(ratio, 4)}
            for group, value, ratio in self._culprits.ranked(groups)
        ]


def markdown(alert: Alert) -> str:
    """The incident as Markdown, for the Text tab and ``mftb incident``."""
    incident = alert.incident or {}
    lines = [f"**{alert.rule}** on `{alert.tag}` at step {alert.step} ({alert.severity}): {alert.message}", ""]
    ranks = incident.get("ranks") or []
    if ranks:
        shown = ", ".join(f"rank {entry['rank']} {_text(entry['value'])}" for entry in ranks)
        lines.append(f"- ranks by `{incident.get('ranks_tag')}`, highest first: {shown}")
    layers = incident.get("layers") or []
    if layers:
        shown = ", ".join(
            f"{entry['group']} {_text(entry['grad_norm'])}"
            + ("" if entry["times_median"] is None else f" ({entry['times_median']:.3g}x its median)")
            for entry in layers
        )
        lines.append(f"- layers: {shown}")
    if "first_divergent_step" in incident:
        lines.append(f"- first divergent step: {_text(incident['first_divergent_step'])} ({incident.get('compared')})")
    state = ", ".join(f"{key} {_text(incident.get(key))}" for key in ("lr", "grad_norm", "loss_scale"))
    lines.append(f"- at that step: {state}")
    samples = incident.get("samples")
    if samples:
        shown = "; ".join(f"rank {entry['rank']}: {', '.join(map(str, entry['indices']))}" for entry in samples)
        lines.append(f"- dataset rows read at that step: {shown}")
    else:
        lines.append(f"- dataset rows: not known ({incident.get('samples_unknown')})")
    checkpoint = incident.get("checkpoint")
    if checkpoint:
        lines.append(f"- last checkpoint before it: `{checkpoint['path']}` (step {checkpoint['step']})")
        note = incident.get("resume_note")
        intro = "- to resume from it, set:" if note else "- to resume from it past this step's batch, set:"
        lines += [intro, "", "```yaml", *incident["resume"], "```"]
        if note:
            lines += ["", f"  ({note})"]
    else:
        lines.append("- last checkpoint before it: none saved")
    return "\n".join(lines)


def _number(value: Any) -> float | str | None:
    """JSON has no NaN or infinity: those are spelled as strings (as Alert.as_dict does)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _text(value: Any) -> str:
    return "n/a" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)
