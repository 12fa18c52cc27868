"""The rules over event files as they grow (alerts/watcher.py), on files this package writes in a
temporary log folder: every run under the folder (itself included) named by its path, each with its
own rules; only what was appended since the last poll read, new files and runs picked up; only the
rules' tags read unless a stall rule needs every step; stalls against a given clock; the rules
checked before anything is read. ``mftb watch`` itself: tests/commands/test_watch.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.watcher import Watcher
from mindformers_tbplugin.schema import ConfigError
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event

LOSS, LR = "train/loss", "train/lr"
LOSS_ABOVE_5 = [{"rule": "threshold", "tag": LOSS, "above": 5.0, "cooldown": 0}]


def write(file: EventFile, points: dict[int, dict[str, float]], wall_time: float = 1000.0) -> None:
    """One scalars event per step, at ``wall_time + step`` seconds, flushed as a live writer flushes."""
    for step, values in points.items():
        file.write(encode_scalars_event(step, wall_time + step, values))
    file.flush()


def watcher_of(logdir: Path, rules: list[dict]) -> tuple[Watcher, list[Alert]]:
    alerts: list[Alert] = []
    return Watcher(logdir, rules, alerts.append), alerts


def test_each_run_is_named_by_its_path_below_the_log_folder(tmp_path: Path) -> None:
    write(EventFile(tmp_path), {1: {LOSS: 9.0}})  # a run in the log folder itself
    write(EventFile(tmp_path / "exp" / "a"), {1: {LOSS: 1.0}, 2: {LOSS: 9.0}})
    watcher, alerts = watcher_of(tmp_path, LOSS_ABOVE_5)
    assert watcher.poll() == 2
    assert watcher.runs == [".", "exp/a"]
    assert [(alert.run, alert.step, alert.value) for alert in alerts] == [(".", 1, 9.0), ("exp/a", 2, 9.0)]
    assert watcher.alerts_fired == 2


def test_each_run_has_rules_of_its_own(tmp_path: Path) -> None:
    # Above 5 for 2 consecutive points: in neither run alone. One rule over both (1, 9, 9, 1) would fire.
    write(EventFile(tmp_path / "a"), {1: {LOSS: 1.0}, 2: {LOSS: 9.0}})
    write(EventFile(tmp_path / "b"), {1: {LOSS: 9.0}, 2: {LOSS: 1.0}})
    watcher, alerts = watcher_of(tmp_path, [{"rule": "threshold", "tag": LOSS, "above": 5.0, "for_steps": 2}])
    assert watcher.poll() == 0 and alerts == []


def test_a_poll_reads_only_what_was_appended_and_picks_up_new_files_and_runs(tmp_path: Path) -> None:
    first = EventFile(tmp_path / "a")
    write(first, {1: {LOSS: 1.0}, 2: {LOSS: 9.0}})
    watcher, alerts = watcher_of(tmp_path, LOSS_ABOVE_5)
    assert (watcher.poll(), watcher.points_read) == (1, 2)
    assert (watcher.poll(), watcher.points_read) == (0, 2)  # nothing new: nothing read again, no new alert
    write(first, {3: {LOSS: 9.5}})
    write(EventFile(tmp_path / "a"), {4: {LOSS: 1.0}})  # a second file of the same run (a restart)
    write(EventFile(tmp_path / "b"), {1: {LOSS: 7.0}})  # a run that began meanwhile
    assert (watcher.poll(), watcher.points_read) == (2, 5)
    assert [(alert.run, alert.step) for alert in alerts] == [("a", 2), ("a", 3), ("b", 1)]
    assert watcher.runs == ["a", "b"]


def test_only_the_rules_and_incidents_tags_are_read_unless_a_stall_rule_needs_every_step(tmp_path: Path) -> None:
    write(EventFile(tmp_path), {step: {LOSS: 1.0, "perf/samples_per_s": 9.0} for step in (1, 2, 3)})
    watcher, _ = watcher_of(tmp_path, LOSS_ABOVE_5)
    watcher.poll()
    assert watcher.points_read == 3  # train/loss only: an incident reads no throughput
    watcher, _ = watcher_of(tmp_path, [*LOSS_ABOVE_5, {"rule": "stall"}])
    watcher.poll()
    assert watcher.points_read == 6  # every point: each may carry a new step


def test_an_alert_carries_the_incident_the_event_files_tell(tmp_path: Path) -> None:
    """The highest rank, the culprit layer against its own median, the step's lr, grad norm and loss scale,
    also when they come after the alert's point; no data rows or checkpoint (said why)."""
    file = EventFile(tmp_path / "job")
    groups = {"grad_norm/embedding": 5.0, "grad_norm/layers.0": 0.5, "grad_norm/layers.1": 0.4}
    healthy = {step: {LOSS: 1.0, LR: 0.1, "train/grad_norm": 1.0, **groups} for step in range(1, 9)}
    write(file, healthy)
    write(file, {9: {LOSS: 9.0, "train/loss_max": 30.0, "train/loss_max_rank": 5.0}})  # the data values first
    write(
        file, {9: {LR: 0.1, "train/grad_norm": 40.0, "train/loss_scale": 1024.0, **groups, "grad_norm/layers.1": 39.0}}
    )
    watcher, alerts = watcher_of(tmp_path, LOSS_ABOVE_5)
    assert watcher.poll() == 1
    incident = alerts[0].incident
    assert incident["ranks"] == [{"rank": 5, "value": 30.0}]
    assert incident["layers"][0] == {"group": "layers.1", "grad_norm": 39.0, "times_median": 97.5}
    assert (incident["lr"], incident["grad_norm"], incident["loss_scale"]) == (pytest.approx(0.1), 40.0, 1024.0)
    assert incident["samples"] is None and "event files" in incident["samples_unknown"]
    assert incident["checkpoint"] is None and incident["resume"] is None
    assert alerts[0].as_dict()["incident"] == incident


def test_a_run_silent_for_too_long_is_reported_once_against_the_given_clock(tmp_path: Path) -> None:
    write(EventFile(tmp_path / "slow"), {step: {LR: 0.1} for step in range(1, 6)})  # one step a second, last at 1005
    write(EventFile(tmp_path / "young"), {1: {LR: 0.1}})  # one step: no interval to compare with yet
    watcher, alerts = watcher_of(tmp_path, [{"rule": "stall", "k": 10, "min_silence": 60}])
    watcher.poll()
    # The limit is max(10 x the 1 s median, 60 s): 60 s of silence are tolerated, 61 are not.
    assert watcher.check_stall(now=1005 + 60) == 0
    assert watcher.check_stall(now=1005 + 61) == 1
    (alert,) = alerts
    assert (alert.run, alert.tag, alert.step, alert.value, alert.baseline) == ("slow", "*", 5, 61.0, 1.0)
    assert alert.message == "no new step for 61 s after step 5 (median step interval 1 s, limit 10x)"
    assert watcher.check_stall(now=1005 + 120) == 0  # said once per stall
    assert watcher.alerts_fired == 1


def test_the_rules_are_checked_before_anything_is_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'spike'"):
        Watcher(tmp_path / "not-yet", [{"rule": "spkie"}], print)
    # stall is for the watcher: accepted here, unlike in a training's AlertMonitor.
    assert Watcher(tmp_path / "not-yet", [{"rule": "stall"}], print).poll() == 0
