"""TensorBoardMonitor in `Model.train(..., callbacks=[...])` without MindFormers' Trainer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HELPERS, read_scalars, run_dirs, subprocess_env
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

from mindformers_tbplugin.pipeline import status_record

pytestmark = pytest.mark.process

SCRIPT = HELPERS / "plain_mindspore_train.py"


def _train(workdir: Path, elsewhere: Path, mode: str, **monitor: object) -> subprocess.CompletedProcess[str]:
    workdir.mkdir(exist_ok=True)
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "relative/tb", str(elsewhere), mode, json.dumps(monitor)],
        cwd=workdir,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plain_model_train_writes_the_tags_it_can_know(tmp_path: Path) -> None:
    result = _train(tmp_path / "work", tmp_path / "elsewhere", "ok")
    assert result.returncode == 0, result.stderr[-4000:]
    # log_dir was made absolute at construction: the chdir before training did not move it.
    assert not (tmp_path / "elsewhere" / "relative").exists()
    (run_dir,) = run_dirs(tmp_path / "work" / "relative" / "tb")
    scalars = read_scalars(run_dir)
    assert set(scalars) == {
        "train/loss",
        "train/lr",
        "train/param_norm",
        "perf/step_time_ms",
        "perf/samples_per_s",
        "system/host_rss_gb",
        "user/step_x2",
    }
    assert [s for s, _ in scalars["train/loss"]] == list(range(1, 17))  # 2 epochs x 8 batches
    assert all(abs(v - 0.01) < 1e-9 for _, v in scalars["train/lr"])
    assert [s for s, _ in scalars["train/param_norm"]] == [5, 10, 15]
    assert scalars["user/step_x2"] == [(s, 2.0 * s) for s in range(1, 17)]
    assert scalars["train/loss"][-1][1] < scalars["train/loss"][0][1]


def test_a_step_is_read_ahead_of_the_callbacks_before_the_monitor(tmp_path: Path) -> None:
    """The monitor reads a logged step's outputs in front of the first callback (framework/call_tap.py):
    what a callback listed before it changes, or the device work it queues, is not what gets logged."""
    result = _train(tmp_path / "work", tmp_path / "elsewhere", "overwrite")
    assert result.returncode == 0, result.stderr[-4000:]
    printed = [line.split() for line in result.stdout.splitlines() if line.startswith("LOSS ")]
    (run_dir,) = run_dirs(tmp_path / "work" / "relative" / "tb")
    logged = read_scalars(run_dir)["train/loss"]
    assert [step for step, _ in logged] == [int(step) for _, step, _ in printed] == list(range(1, 17))
    assert [value for _, value in logged] == pytest.approx([float(loss) for _, _, loss in printed], rel=1e-6)


def test_training_that_raises_still_closes_the_run(tmp_path: Path) -> None:
    result = _train(tmp_path / "work", tmp_path / "elsewhere", "raise")
    assert result.returncode != 0
    assert "simulated failure at step 6" in result.stderr
    (run_dir,) = run_dirs(tmp_path / "work" / "relative" / "tb")
    assert [s for s, _ in read_scalars(run_dir)["train/loss"]] == list(range(1, 7))
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    (status,) = accumulator.Tensors("meta/status")
    assert status.tensor_proto.string_val[0].decode() == "failed at step 6: RuntimeError"
    record = status_record.decode((run_dir / status_record.STATUS_FILE).read_text())
    assert (record.state, record.detail, record.step) == ("failed", "failed at step 6: RuntimeError", 6)


def test_keep_last_runs_removes_older_runs_at_train_begin(tmp_path: Path) -> None:
    """Three trainings of one experiment with keep_last_runs 2: the last two runs stay, whole; the first is
    deleted at the third one's begin, which says so. (Two starts in one second get distinct folders.)"""
    written, outputs = [], []
    for _ in range(3):
        result = _train(tmp_path / "work", tmp_path / "elsewhere", "ok", keep_last_runs=2, resume=False)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append(result.stdout + result.stderr)
        (run,) = re.findall(r"TensorBoardMonitor: writing (\S+)\. View it", outputs[-1])
        written.append(Path(run))
    assert len(set(written)) == 3
    assert run_dirs(tmp_path / "work" / "relative" / "tb") == sorted(written[1:])
    for run_dir in written[1:]:
        assert [s for s, _ in read_scalars(run_dir)["train/loss"]] == list(range(1, 17))
    assert "keep_last_runs=2:" not in outputs[0] + outputs[1]
    assert f"TensorBoardMonitor: keep_last_runs=2: {written[0]} deleted" in outputs[2]
