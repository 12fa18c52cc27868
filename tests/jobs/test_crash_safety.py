"""Crash safety with real processes: SIGTERM and SIGKILL of a real MindFormers training, and disk
faults (a file-size limit, a deleted run folder) that must never stop training."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import HELPERS, MFTB, mf_losses, read_scalars, run_dirs, subprocess_env, write_tiny_config
from tb_helpers import wait_for
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

pytestmark = pytest.mark.process


def _slow_training(folder: Path, data: Path, flush_secs: float) -> subprocess.Popen[str]:
    callbacks = [
        {"type": "MFLossMonitor"},
        {"type": "SlowRank", "auto_register": "rank_hooks.SlowRank"},
        {"type": "TensorBoardMonitor", "log_dir": str(folder / "tb"), "experiment": "crash", "flush_secs": flush_secs},
    ]
    config = write_tiny_config(folder, data, callbacks, num_samples=200)
    env = subprocess_env(REGISTER_PATH=str(HELPERS), PYTHONPATH=str(HELPERS), MFTB_TEST_SLOW_RANK="0")
    return subprocess.Popen(
        [MFTB, "train", "--config", str(config)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_printed_step(process: subprocess.Popen[str], step: int) -> list[str]:
    lines = []
    for line in process.stdout:
        lines.append(line)
        if f"step:[{step:5d}/" in line:
            return lines
    raise AssertionError("training ended early:\n" + "".join(lines[-40:]))


def _texts(run_dir: Path, tag: str) -> list[str]:
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    if tag not in accumulator.Tags()["tensors"]:
        return []
    return [event.tensor_proto.string_val[0].decode() for event in accumulator.Tensors(tag)]


def test_sigterm_writes_every_point_and_the_status_and_keeps_the_exit_status(tmp_path: Path, tiny_data: Path) -> None:
    # A one-hour flush interval: only the SIGTERM close can put the points on disk.
    process = _slow_training(tmp_path, tiny_data, flush_secs=3600)
    lines = _wait_for_printed_step(process, 12)
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGTERM
    last_printed = max(mf_losses("".join(lines) + rest))
    (run_dir,) = run_dirs(tmp_path / "tb")
    (status,) = _texts(run_dir, "meta/status")
    last_logged = int(status.removeprefix("terminated at step "))
    record = json.loads((run_dir / "mftb_status.json").read_text())  # `mftb runs`: a SIGTERM is a failure
    assert (record["state"], record["detail"], record["step"]) == ("failed", status, last_logged)
    # The signal may land between MFLossMonitor's print and our callback in the same step.
    assert last_logged in (last_printed - 1, last_printed)
    assert [step for step, _ in read_scalars(run_dir)["train/loss"]] == list(range(1, last_logged + 1))


def test_sigkill_leaves_readable_files_with_every_flushed_point(tmp_path: Path, tiny_data: Path) -> None:
    """Killed once its first flushes are on disk (as TensorBoard's reader sees them): every event file
    reads to its end, the steps are contiguous from 1, and nothing flushed before the kill is lost. How
    many seconds of points a kill loses is measured in BENCHMARKS.md ("Crash safety")."""
    process = _slow_training(tmp_path, tiny_data, flush_secs=1.0)
    seen: list[int] = []

    def flushed() -> bool:
        runs = run_dirs(tmp_path / "tb")
        seen[:] = [step for step, _ in read_scalars(runs[0]).get("train/loss", [])] if runs else []
        return len(seen) >= 8

    try:
        assert wait_for(flushed, timeout=300), "no points reached the disk"
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the training ended before it was killed"
    (run_dir,) = run_dirs(tmp_path / "tb")
    for path in run_dir.glob("*tfevents*"):
        list(EventFileLoader(str(path)).Load())  # reads to the end; a torn last record is skipped
    scalars = read_scalars(run_dir)
    on_disk = [step for step, _ in scalars["train/loss"]]
    assert on_disk == list(range(1, len(on_disk) + 1))
    assert on_disk[: len(seen)] == seen
    # `mftb runs`: the run stays "running" in its status record; once nothing was written for --stale-after
    # seconds it is stale, at the step its event files reached (the record is rewritten only every 15 s).
    row = wait_for(lambda: _stale_row(tmp_path / "tb"), timeout=60)
    assert row is not None, "mftb runs never said stale"
    assert (row["run"], row["state"]) == (run_dir.name, "stale")
    assert (row["step"], row["loss"]) == (on_disk[-1], pytest.approx(scalars["train/loss"][-1][1], rel=1e-6))
    assert row["step"] == max(step for series in scalars.values() for step, _ in series)


def _stale_row(root: Path) -> dict | None:
    listed = subprocess.run(
        [MFTB, "runs", str(root), "--json", "--stale-after", "1"], env=subprocess_env(), capture_output=True, text=True
    )
    rows = json.loads(listed.stdout)
    return rows[0] if rows and rows[0]["state"] == "stale" else None


def _fault_training(tmp_path: Path, mode: str, file_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit_file_size() -> None:
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run(
        [sys.executable, str(HELPERS / "fault_train.py"), str(tmp_path / "tb"), mode],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit_file_size,
    )


def test_full_disk_never_stops_training_and_warns_once(tmp_path: Path) -> None:
    result = _fault_training(tmp_path, "fsize", file_limit=4096)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DONE" in result.stdout and "STEP 40" in result.stdout
    output = result.stdout + result.stderr
    assert output.count("cannot write (") == 1, output[-3000:]
    assert "File too large" in output
    assert output.count("monitoring resumed") == 1
    (run_dir,) = run_dirs(tmp_path / "tb")
    # Each new event file takes points until it reaches the limit again: monitoring went on.
    files = sorted(run_dir.glob("*tfevents*"))
    assert len(files) > 1 and all(f.stat().st_size <= 4096 for f in files)
    steps = [step for step, _ in read_scalars(run_dir)["train/loss"]]
    assert steps == sorted(steps) and steps[-1] >= 35


def test_deleted_run_folder_is_recreated_and_training_goes_on(tmp_path: Path) -> None:
    result = _fault_training(tmp_path, "delete")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DONE" in result.stdout
    assert (result.stdout + result.stderr).count("was deleted during training") == 1
    (run_dir,) = run_dirs(tmp_path / "tb")
    steps = [step for step, _ in read_scalars(run_dir)["train/loss"]]
    # The points logged after the deletion are there. Step 10's own point is logged just after it
    # (the deleting callback runs first) and lands in the old or the new file, depending on when the
    # writer thread drains it; everything before step 10 went to the deleted file.
    assert steps[-1] == 40 and steps[0] >= 10 and steps == list(range(steps[0], 41))


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted for the test (needs root; CI runs as root)."""
    mount_point = tmp_path / "small_fs"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the file-size limit test still runs"
        )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], capture_output=True)


def test_full_disk_then_space_again_resumes_monitoring(tmp_path: Path, small_filesystem: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(HELPERS / "fault_train.py"), str(small_filesystem), "fill"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "DONE" in result.stdout
    assert output.count("cannot write (") == 1 and "No space left on device" in output
    assert output.count("monitoring resumed") == 1
    (run_dir,) = [p for p in small_filesystem.iterdir() if p.is_dir()]
    steps = [step for step, _ in read_scalars(run_dir)["train/loss"]]
    assert steps[-1] == 40 and 10 in steps  # before the disk filled, and after space came back
    assert not set(range(12, 25)) <= set(steps)  # points were dropped while it was full
