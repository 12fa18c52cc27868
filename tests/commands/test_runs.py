"""`mftb runs`: the table and `--json` of the shared tiny training (against its own event files, read by
TensorBoard's EventAccumulator), options, filters and bad input. A killed training's stale line:
tests/jobs/test_crash_safety.py; a run stopped by an alert: tests/callbacks/test_alert_monitor.py; a
failed one: tests/jobs/test_plain_mindspore.py."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import MFTB, TrainingRun, read_scalars, subprocess_env

from mindformers_tbplugin import cli
from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.status_record import StatusRecord


def _mftb_runs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MFTB, "runs", *args], env=subprocess_env(), capture_output=True, text=True, timeout=120)


def test_the_tiny_training_listed_finished_with_its_last_step_and_loss(tiny_run: TrainingRun) -> None:
    loss = read_scalars(tiny_run.run_dir)["train/loss"]
    listed = _mftb_runs(str(tiny_run.log_root), "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["run"], row["state"], row["experiment"]) == (tiny_run.run_dir.name, "finished", "llama_tiny")
    assert (row["step"], row["total_steps"], row["loss"]) == (loss[-1][0], 32, pytest.approx(loss[-1][1], rel=1e-6))
    assert row["source"] == "status record" and row["world_size"] == 1 and row["alerts"] == 0
    table = _mftb_runs(str(tiny_run.log_root)).stdout.splitlines()
    assert table[0].split()[:3] == ["RUN", "EXPERIMENT", "OWNER"]
    cells = table[1].split()
    assert cells[0] == tiny_run.run_dir.name and "finished" in cells and f"{loss[-1][0]}/32" in cells
    assert f"{loss[-1][1]:.5g}" in cells
    assert table[2].startswith("1 of 1 runs under ")


def _root(tmp_path: Path) -> Path:
    now = time.time()
    for name, state, started in [
        ("a/llama_1", status_record.FINISHED, now - 7200),
        ("a/llama_2", status_record.RUNNING, now - 60),
        ("b/qwen_1", status_record.STOPPED, now - 600),
    ]:
        (tmp_path / name).mkdir(parents=True)
        record = StatusRecord(
            experiment=name.split("/")[1].split("_")[0],
            started=started,
            updated=now,
            progressed=now,
            state=state,
            step=int(now - started),
            loss=1.5,
        )
        status_record.write(tmp_path / name, record)
    (tmp_path / "b" / "half").mkdir()
    (tmp_path / "b" / "half" / status_record.STATUS_FILE).write_text("{")
    return tmp_path


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert cli.main(["runs", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_fields_filters_and_sort(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(_root(tmp_path))
    rows = _json(capsys, root)
    assert [row["run"] for row in rows] == ["a/llama_2", "b/qwen_1", "a/llama_1", "b/half"]  # newest first
    assert {"run", "state", "step", "loss", "owner", "hosts", "world_size", "started", "duration"} <= set(rows[0])
    assert rows[-1]["state"] == "unreadable" and rows[-1]["problem"].startswith("mftb_status.json: not JSON")
    assert [r["run"] for r in _json(capsys, root, "--status", "stopped-by-alert,running")] == ["a/llama_2", "b/qwen_1"]
    assert [r["run"] for r in _json(capsys, root, "--status", "finished", "--status", "unreadable")] == [
        "a/llama_1",
        "b/half",
    ]
    assert [r["run"] for r in _json(capsys, root, "--experiment", "qwen")] == ["b/qwen_1"]
    assert [r["run"] for r in _json(capsys, root, "--since", "1h")] == ["a/llama_2", "b/qwen_1"]
    assert [r["run"] for r in _json(capsys, root, "--sort", "step")] == ["a/llama_1", "b/qwen_1", "a/llama_2", "b/half"]
    reverse = ["b/qwen_1", "b/half", "a/llama_2", "a/llama_1"]
    assert [r["run"] for r in _json(capsys, root, "--sort", "run", "--reverse")] == reverse
    assert [r["state"] for r in _json(capsys, root, "--stale-after", "0.001", "--status", "stale")] == ["stale"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--status", "done"], "unknown state 'done'; allowed: starting, running, stale, failed, stopped by alert"),
        (["--since", "last week"], "cannot read --since 'last week'"),
        (["--stale-after", "0"], "--stale-after must be a positive number of seconds, got 0"),
        (["--watch", "-1"], "--watch must be a positive number of seconds, got -1"),
    ],
)
def test_bad_options_exit_2_saying_what_is_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert cli.main(["runs", str(tmp_path), *args]) == 2
    error = capsys.readouterr().err
    assert error.startswith("mftb runs: error: ") and said in error and "Traceback" not in error


def test_a_root_that_is_no_folder_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["runs", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_watch_redraws_until_interrupted(tmp_path: Path) -> None:
    """Two frames (each clears the screen and ends with the summary line), then Ctrl-C: exit 0."""
    import signal

    root = _root(tmp_path)
    # An ignored SIGINT is inherited across exec (the test process may ignore it: a background job of a
    # non-interactive shell, a library imported earlier), and Python then installs no Ctrl-C handler: the
    # watcher gets the disposition of a terminal's foreground process.
    process = subprocess.Popen(
        [MFTB, "runs", str(root), "--watch", "0.2"],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        frames = 0
        for line in process.stdout:
            frames += line.startswith("3 of 4 runs") or " of 4 runs under " in line
            if frames == 2:
                break
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)  # drained: a full pipe would hold its last write at exit
        assert process.returncode == 0
    finally:
        process.kill()
    assert frames == 2


def test_docs_cli_names_every_option_sort_key_state_and_record_field() -> None:
    import argparse
    from dataclasses import fields

    from conftest import REPO

    from mindformers_tbplugin.commands import runs
    from mindformers_tbplugin.viewer.runs_table import SORT_KEYS, STATES

    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page[page.index("## `mftb runs`") :]
    parser = argparse.ArgumentParser()
    runs.add_arguments(parser)
    options = [name for action in parser._actions for name in action.option_strings if name not in ("-h", "--help")]
    assert len(options) == 8
    named = [f"`{name}" for name in options] + [f"`{key}`" for key in SORT_KEYS] + [f"`{state}`" for state in STATES]
    named += [f"`{field.name}`" for field in fields(StatusRecord)] + ["`mftb_status.json`", "default 300"]
    assert [name for name in named if name not in section] == []
