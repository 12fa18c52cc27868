"""Resume without fold-back, proven in TensorBoard itself: a real training with checkpoints is
killed (SIGKILL) mid-run, resumed from its last checkpoint, and read back through real TensorBoard
servers with both data loaders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import (
    BIN,
    HELPERS,
    MFTB,
    mf_losses,
    read_scalars,
    resumable_callbacks,
    run_dirs,
    subprocess_env,
    write_tiny_config,
)
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

from mindformers_tbplugin.viewer.tensorboard_server import any_free_port

pytestmark = [pytest.mark.process, pytest.mark.compat]

STEPS = 20


@dataclass
class Resumed:
    log_root: Path
    checkpoint_step: int
    killed_after: int
    resume_started: float  # wall time at which the resumed attempt was launched
    resumed_output: str


def _config(folder: Path, data: Path) -> Path:
    monitor = {"type": "TensorBoardMonitor", "log_dir": str(folder / "tb"), "experiment": "resume", "flush_secs": 0.2}
    callbacks = resumable_callbacks(monitor)
    return write_tiny_config(folder, data, callbacks, num_samples=2 * STEPS)


def _logged_steps(log_root: Path) -> list[int]:
    runs = run_dirs(log_root)
    return [step for step, _ in read_scalars(runs[0]).get("train/loss", [])] if runs else []


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> Resumed:
    folder = tmp_path_factory.mktemp("resume")
    config = _config(folder, tiny_data)
    env = subprocess_env(
        REGISTER_PATH=str(HELPERS), PYTHONPATH=str(HELPERS), MFTB_TEST_SLOW_RANK="0", MFTB_TEST_SLOW_SECONDS="0.4"
    )
    first = subprocess.Popen(
        [MFTB, "train", "--config", str(config)],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while first.poll() is None and time.monotonic() < deadline:
        # Checkpoints at 8 and 16: kill at step 10-11, seconds before the second one.
        if max(_logged_steps(folder / "tb"), default=0) >= 10:
            first.send_signal(signal.SIGKILL)
            break
        time.sleep(0.1)
    assert first.wait(timeout=60) == -signal.SIGKILL, "the first attempt ended before it could be killed"
    killed_after = max(_logged_steps(folder / "tb"))
    meta = json.loads((folder / "output" / "checkpoint" / "rank_0" / "meta.json").read_text())
    checkpoint_step = int(meta["last_step"])
    assert 4 <= checkpoint_step < killed_after < STEPS

    started = time.time()
    checkpoints = str(folder / "output" / "checkpoint")
    second = subprocess.run(
        [MFTB, "train", "--config", str(config), "--resume_training", "True", "--load_checkpoint", checkpoints],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    return Resumed(folder / "tb", checkpoint_step, killed_after, started, second.stdout + second.stderr)


@contextmanager
def tensorboard_server(logdir: Path, load_fast: bool) -> Iterator[str]:
    port = any_free_port()
    process = subprocess.Popen(
        [
            str(BIN / "tensorboard"),
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            f"--load_fast={'true' if load_fast else 'false'}",
            "--samples_per_plugin",
            "scalars=1000000000",  # "scalars=0" means "keep all" to the Python loader but "none" to the Rust one
            "--reload_interval",
            "1",
        ],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base}/data/runs", timeout=5) as response:
                    if json.loads(response.read()):
                        break
            except OSError:
                pass
            time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def _scalars(base: str, run: str, tag: str) -> list[list[float]]:
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base}/data/plugin/scalars/scalars?{query}", timeout=10) as response:
                points = json.loads(response.read())
            if len(points) >= STEPS or time.monotonic() > deadline:
                return points
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(1)


@pytest.mark.parametrize("load_fast", [True, False], ids=["rust-data-server", "python-loader"])
def test_tensorboard_shows_no_fold_back_after_resume(resumed: Resumed, load_fast: bool) -> None:
    (run_dir,) = run_dirs(resumed.log_root)
    assert len(list(run_dir.glob("*tfevents*"))) == 2  # one file per attempt, in the same run
    with tensorboard_server(resumed.log_root, load_fast) as base:
        points = _scalars(base, run_dir.name, "train/loss")
    steps = [int(step) for _, step, _ in points]
    assert steps == list(range(1, STEPS + 1))  # strictly increasing, nothing twice
    resumed_losses = mf_losses(resumed.resumed_output)
    for wall_time, step, value in points:
        if step > resumed.checkpoint_step:
            # Written by the resumed attempt, never by the killed one.
            assert wall_time >= resumed.resume_started, (step, wall_time)
            assert abs(value - resumed_losses[int(step)][0]) <= 1e-6
        else:
            assert wall_time < resumed.resume_started


def test_restart_marker_and_text_say_what_was_resumed(resumed: Resumed) -> None:
    (run_dir,) = run_dirs(resumed.log_root)
    s = resumed.checkpoint_step
    assert read_scalars(run_dir)["meta/restart"] == [(s + 1, float(s))]
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    (restart,) = accumulator.Tensors("meta/restart")
    text = restart.tensor_proto.string_val[0].decode()
    assert f"Resumed at step {s + 1}" in text and f"(step {s})" in text
    statuses = [t.tensor_proto.string_val[0].decode() for t in accumulator.Tensors("meta/status")]
    assert statuses == [f"completed at step {STEPS}"]  # the killed attempt never wrote one
    assert f"continuing {run_dir} after step {s}" in resumed.resumed_output
    assert os.path.isdir(run_dir)
