"""viewer/runs_table.py (and run_tails.py, runs_text.py): every run under a root, one row each, from status
records written by pipeline/status_record.py and from event files written by the real RunWriter, read back
against TensorBoard's own EventAccumulator; stale records, half-written and unreadable folders, filters
and order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import read_scalars

from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.status_record import STATUS_FILE, StatusRecord
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import runs_table, runs_text

NOW = 1_800_000_000.0


def _record(root: Path, name: str, **fields: object) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True, exist_ok=True)
    defaults = {
        "experiment": name.split("/")[-1].split("_")[0],
        "started": NOW - 3600,
        "updated": NOW - 5,
        "progressed": NOW - 5,
    }
    status_record.write(run_dir, StatusRecord(**{**defaults, **fields}))
    return run_dir


def _rows(root: Path, stale_after: float = 300.0) -> dict[str, runs_table.RunRow]:
    return {row.run: row for row in runs_table.list_runs(root, stale_after, now=NOW)}


def test_a_record_becomes_a_row_and_stale_is_derived_by_the_reader(tmp_path: Path) -> None:
    _record(tmp_path, "a/llama_1", step=40, total_steps=100, loss=2.5, progressed=NOW - 5, owner="ann", world_size=8)
    _record(tmp_path, "a/llama_2", step=40, updated=NOW - 400, progressed=NOW - 400)  # gone: no record for 400 s
    # alive (rewritten 5 s ago) but no new step for 1,000 s, with steps 10 s apart: hung
    _record(tmp_path, "b/qwen_1", step=7, progressed=NOW - 1000, step_interval=10.0)
    # slow steps (2,000 s apart): 1,000 s without a new one is not yet hung
    _record(tmp_path, "b/qwen_2", step=7, progressed=NOW - 1000, step_interval=2000.0)
    _record(tmp_path, "b/qwen_3", state=status_record.FINISHED, updated=NOW - 1800)  # ended: never stale
    # an hour without a step, its record rewritten 5 s ago: compiling, not hung; without its record: gone
    _record(tmp_path, "c/deepseek_1", progressed=None)
    _record(tmp_path, "c/deepseek_2", progressed=None, updated=NOW - 400)
    rows = _rows(tmp_path)
    assert {name: row.state for name, row in rows.items()} == {
        "c/deepseek_1": "starting",
        "c/deepseek_2": "stale",
        "a/llama_1": "running",
        "a/llama_2": "stale",
        "b/qwen_1": "stale",
        "b/qwen_2": "running",
        "b/qwen_3": "finished",
    }
    first = rows["a/llama_1"]
    assert (first.step, first.total_steps, first.loss, first.owner, first.world_size) == (40, 100, 2.5, "ann", 8)
    assert first.duration == 3600  # running: until now; ended: until its last record
    assert rows["b/qwen_3"].duration == 1800
    assert rows["c/deepseek_1"].duration == 3600  # starting: until now too
    assert _rows(tmp_path, stale_after=1)["b/qwen_3"].state == "finished"
    assert _rows(tmp_path, stale_after=5000)["a/llama_2"].state == "running"


def test_a_stale_row_takes_the_step_its_event_file_reached(tmp_path: Path) -> None:
    """The record is rewritten a few times a minute; a killed run's event file may be further on."""
    run_dir = _record(tmp_path, "job_1", step=3, loss=9.0, updated=NOW - 600)
    writer = RunWriter(run_dir)
    for step in range(1, 13):
        writer.add_scalars(step, {"train/loss": 10.0 - step / 4})
    writer.close()
    (row,) = _rows(tmp_path).values()
    loss = read_scalars(run_dir)["train/loss"]
    assert (row.state, row.step, row.loss) == ("stale", loss[-1][0], loss[-1][1])


def test_a_run_without_a_record_gets_a_row_from_its_event_files_tail(tmp_path: Path) -> None:
    run_dir = tmp_path / "old" / "llama_20261201-101010"
    writer = RunWriter(run_dir)
    for step in range(1, 5001):  # ~330 kB: only the last 16 KiB are read
        writer.add_scalars(step, {"train/loss": 3.0 - step / 5000, "perf/tokens_per_s": 1000.0 + step})
    writer.add_scalars(5000 * 64, {"train/loss_vs_tokens": 2.0})  # a twin's step counts tokens
    writer.add_text(5000, "meta/status", "stopped by AlertMonitor (spike on train/loss) at step 5000")
    writer.close()
    imported = RunWriter(tmp_path / "imported" / "train")  # a plain TensorBoard folder, still being written
    imported.add_scalars(7, {"train/loss": 1.25})
    imported.close()
    rows = _rows(tmp_path, stale_after=1e12)
    old = rows["old/llama_20261201-101010"]
    scalars = read_scalars(run_dir)
    assert (old.source, old.state, old.experiment) == ("event files", "stopped by alert", "llama")
    assert (old.step, old.loss) == scalars["train/loss"][-1]
    assert old.tokens_per_s_per_device is None  # the world size is not known: no per-device rate
    assert old.started == time.mktime(time.strptime("20261201-101010", "%Y%m%d-%H%M%S"))
    assert old.detail.startswith("stopped by AlertMonitor")
    plain = rows["imported/train"]
    assert (plain.state, plain.experiment, plain.step, plain.loss) == ("running", "train", 7, 1.25)
    assert _rows(tmp_path, stale_after=1)["imported/train"].state == "unknown"  # nothing says how it ended


def test_half_written_and_unreadable_folders_say_so_and_the_others_are_listed(tmp_path: Path) -> None:
    _record(tmp_path, "good_1", step=5)
    broken = tmp_path / "broken_1"
    broken.mkdir()
    (broken / STATUS_FILE).write_text('{"experiment": "broken", "state": "runn')  # cut while copied
    foreign = tmp_path / "foreign_1"
    foreign.mkdir()
    (foreign / STATUS_FILE).write_text('{"state": "running"}')  # no times
    torn = tmp_path / "torn_1"
    writer = RunWriter(torn)
    writer.add_scalars(1, {"train/loss": 4.0})
    writer.add_scalars(2, {"train/loss": 3.0})
    writer.close()
    (event_file,) = torn.iterdir()
    event_file.write_bytes(event_file.read_bytes()[:-7])  # the last record half written
    rows = _rows(tmp_path, stale_after=1e12)
    assert rows["good_1"].state == "running"
    assert rows["broken_1"].state == "unreadable"
    assert rows["broken_1"].problem.startswith(f"{STATUS_FILE}: not JSON (Unterminated string")
    assert (rows["foreign_1"].state, rows["foreign_1"].problem) == (
        "unreadable",
        f"{STATUS_FILE}: field 'started' is None",
    )
    assert (rows["torn_1"].step, rows["torn_1"].loss) == (1, 4.0)  # the complete record before the torn one
    lines = runs_text.table(list(rows.values()), now=NOW)
    (line,) = [line for line in lines if line.startswith("broken_1")]
    assert "unreadable" in line and line.endswith(rows["broken_1"].problem)


def test_rank_folders_belong_to_their_run_and_nested_runs_are_found(tmp_path: Path) -> None:
    job = _record(tmp_path, "cluster/job7/tensorboard/llama_1", world_size=16)
    for rank in range(3):
        RunWriter(job / f"rank_{rank}").close()
    EventFile(job / "baseline").close()  # a live comparison's sub-run (TensorBoardMonitor's baseline option)
    _record(tmp_path, "cluster/job8/tensorboard/llama_1")
    (tmp_path / ".hidden" / "x").mkdir(parents=True)
    _record(tmp_path / ".hidden", "x/llama_1")
    assert sorted(_rows(tmp_path)) == ["cluster/job7/tensorboard/llama_1", "cluster/job8/tensorboard/llama_1"]
    assert list(_rows(job)) == ["."]  # the root itself is a run


def test_filters_and_order(tmp_path: Path) -> None:
    _record(tmp_path, "llama_a", started=NOW - 7200, step=10, loss=2.0, alerts=1)
    _record(tmp_path, "llama_b", started=NOW - 600, step=30, loss=3.0, state=status_record.FAILED)
    _record(tmp_path, "qwen_a", started=NOW - 60, step=20, loss=1.0, mfu=0.4)
    _record(tmp_path, "qwen_b", started=NOW - 86400 * 3, updated=NOW - 1000, progressed=NOW - 1000)  # stale
    rows = list(_rows(tmp_path).values())

    def names(chosen: list[runs_table.RunRow]) -> list[str]:
        return [row.run for row in chosen]

    assert names(runs_table.sort_rows(rows)) == ["qwen_a", "llama_b", "llama_a", "qwen_b"]  # newest first
    assert names(runs_table.sort_rows(rows, "start", reverse=True)) == ["qwen_b", "llama_a", "llama_b", "qwen_a"]
    assert names(runs_table.sort_rows(rows, "loss")) == ["qwen_a", "llama_a", "llama_b", "qwen_b"]  # none last
    assert names(runs_table.sort_rows(rows, "step")) == ["llama_b", "qwen_a", "llama_a", "qwen_b"]
    assert names(runs_table.sort_rows(rows, "state")) == ["llama_a", "qwen_a", "qwen_b", "llama_b"]
    assert names(runs_table.select(rows, experiment="qwen")) == ["qwen_a", "qwen_b"]
    assert sorted(names(runs_table.select(rows, experiment="l*"))) == ["llama_a", "llama_b"]
    assert sorted(names(runs_table.select(rows, {"stale", "failed"}))) == ["llama_b", "qwen_b"]
    since = runs_table.parse_since("2h", NOW)
    assert sorted(names(runs_table.select(rows, since=since))) == ["llama_a", "llama_b", "qwen_a"]
    assert runs_table.parse_since("2026-12-07T09:30", NOW) == time.mktime((2026, 12, 7, 9, 30, 0, 0, 0, -1))
    assert runs_table.normal_state("Stopped-By_Alert") == "stopped by alert"
    with pytest.raises(ValueError, match="unknown state 'done'; allowed: starting, running, stale"):
        runs_table.normal_state("done")
    with pytest.raises(ValueError, match="give a time ago"):
        runs_table.parse_since("yesterday", NOW)
