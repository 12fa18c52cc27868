"""session/status_writer.py: the run's status record, kept by its writer thread. In the shared tiny training
(every value against the run's own event files, read by TensorBoard's EventAccumulator), and on a real
RunWriter without a training: alerts noted, and a writer closed before the training's end."""

from __future__ import annotations

import getpass
import socket
from pathlib import Path

import pytest
from conftest import TrainingRun, read_scalars
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.run import Run
from mindformers_tbplugin.pipeline.status_record import FAILED, FINISHED, STATUS_FILE
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.session.run_folder import RankHost
from mindformers_tbplugin.session.status_writer import StatusWriter
from mindformers_tbplugin.tfevents.writer import RunWriter

ALONE = Topology(0, 1, 1, "stand_alone", False, communicating=False)


def _record(run_dir: Path) -> status_record.StatusRecord:
    return status_record.decode((run_dir / STATUS_FILE).read_text())


def test_the_tiny_trainings_record_matches_its_event_files(tiny_run: TrainingRun) -> None:
    run_dir = tiny_run.run_dir
    record = _record(run_dir)
    scalars = read_scalars(run_dir)
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    (status,) = accumulator.Tensors("meta/status")
    # the "vs tokens" twins are written at a token count: not a step
    assert scalars["train/loss_vs_tokens"][-1][0] > scalars["train/loss"][-1][0]
    last_step = max(step for tag, series in scalars.items() if "_vs_" not in tag for step, _ in series)
    assert (record.state, record.detail) == (FINISHED, status.tensor_proto.string_val[0].decode())
    assert record.detail == "completed at step 32"
    assert (record.step, record.total_steps) == (last_step, 32)
    assert (record.loss_step, record.loss) == scalars["train/loss"][-1]  # float32 both ways: exact
    # one device; the event file holds float32
    assert record.tokens_per_s_per_device == pytest.approx(scalars["perf/tokens_per_s"][-1][1], rel=1e-6)
    assert record.mfu is None and "perf/mfu" not in scalars  # no peak_tflops in this training
    assert (record.experiment, record.run) == ("llama_tiny", run_dir.name)
    assert record.owner == getpass.getuser()
    assert (record.hosts, record.host_count, record.world_size) == ([socket.gethostname()], 1, 1)
    wall_times = [event.wall_time for event in accumulator.Scalars("train/loss")]
    assert record.started <= wall_times[0] and record.updated >= wall_times[-1]
    assert (record.alerts, record.alert_rules, record.last_incident_step) == (0, [], None)
    assert not [p for p in run_dir.iterdir() if p.name.startswith(f".{STATUS_FILE}")]  # no temporary left


def _writer(tmp_path: Path, run: Run) -> tuple[StatusWriter, RunWriter]:
    hosts = [RankHost(0, "node-b"), RankHost(0, "node-a"), RankHost(1, "node-b")]
    status = StatusWriter(tmp_path, "exp", ALONE, hosts, run, 100, None)
    writer = RunWriter(tmp_path, poll_secs=0.05)
    status.attach(writer)
    return status, writer


def test_alerts_and_an_early_close_reach_the_record(tmp_path: Path) -> None:
    run = Run()
    _, writer = _writer(tmp_path, run)
    writer.add_scalars(1, {"train/loss": 2.5, "perf/tokens_per_s": 640.0, "perf/mfu": 0.25})
    assert writer.flush()
    assert _record(tmp_path).step == 1  # the first step is recorded at once, not at the next cadence
    run.note_alert("spike", 7, True)
    run.note_alert("stall", 9, False)  # a stall carries no incident
    writer.add_scalars(9, {"train/loss": float("nan")})
    writer.add_scalars(9 * 64, {"train/loss_vs_samples": 1.0})  # a twin's step counts samples
    writer.close()  # before any end state: the process ended during training
    record = _record(tmp_path)
    assert (record.state, record.detail) == (FAILED, "the process ended during training, after step 9")
    assert (record.alerts, record.alert_rules, record.last_incident_step) == (2, ["spike", "stall"], 7)
    assert (record.step, record.loss, record.loss_step) == (9, None, 9)  # NaN: no JSON number
    assert (record.tokens_per_s_per_device, record.mfu) == (640.0, 0.25)
    assert (record.hosts, record.host_count, record.total_steps) == (["node-a", "node-b"], 2, 100)


def test_the_end_state_the_session_sets_is_the_last_record(tmp_path: Path) -> None:
    status, writer = _writer(tmp_path, Run())
    writer.add_scalars(3, {"train/loss": 1.0})
    status.end(status_record.STOPPED, "stopped by AlertMonitor (nonfinite on train/loss) at step 3")
    writer.close()
    record = _record(tmp_path)
    assert record.state == "stopped by alert" and record.detail.endswith("at step 3")
