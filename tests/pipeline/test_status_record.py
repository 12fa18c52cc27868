"""pipeline/status_record.py: what a written step changes in the record, the stale rule, the atomic
replacement (with the umask's permissions, for a team on shared storage) and what a reader refuses."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.status_record import RecordError, StatusRecord


def test_written_steps_move_the_record_and_the_interval_is_between_logged_steps() -> None:
    record = StatusRecord(world_size=4, started=0.0)
    record.see(100, {"train/lr": 1e-4}, now=10.0)  # a model value first: a new step, no loss yet
    record.see(200, {"train/loss": 2.0, "perf/tokens_per_s": 8000.0}, now=60.0)
    record.see(100, {"train/loss": 3.0}, now=61.0)  # an older step's loss, written at the aggregation
    record.see(200, {"perf/mfu": float("inf")}, now=61.5)  # JSON has no infinity: null
    record.see(12_800, {"train/loss_vs_samples": 2.0}, now=62.0)  # a twin: its step counts samples
    assert (record.step, record.progressed, record.step_interval) == (200, 60.0, 50.0)
    assert (record.loss, record.loss_step, record.tokens_per_s_per_device, record.mfu) == (2.0, 200, 2000.0, None)


def test_stale_when_not_rewritten_or_not_advancing() -> None:
    record = StatusRecord(started=0.0, updated=1000.0, progressed=900.0, step_interval=200.0)
    assert status_record.state_at(record, 1200.0, 300.0) == "running"
    assert status_record.state_at(record, 1301.0, 300.0) == "stale"  # no record for 301 s
    record.updated = 1590.0  # rewritten, but no new step for 3 x 200 s
    assert status_record.state_at(record, 1499.0, 300.0) == "running"
    assert status_record.state_at(record, 1501.0, 300.0) == "stale"
    record.state = status_record.FINISHED
    assert status_record.state_at(record, 1e9, 300.0) == "finished"


def test_starting_until_the_first_step_however_long_while_rewritten() -> None:
    """A large model's first compile: no step for an hour, the record rewritten every 15 s."""
    record = StatusRecord(started=0.0, updated=3600.0)
    assert status_record.state_at(record, 3610.0, 300.0) == "starting"
    assert status_record.state_at(record, 3901.0, 300.0) == "stale"  # the process is gone: no record for 301 s
    record.see(1, {"train/loss": 2.0}, now=3605.0)
    assert status_record.state_at(record, 3610.0, 300.0) == "running"


def test_replaced_whole_with_the_umasks_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        status_record.write(tmp_path, StatusRecord(experiment="a", started=1.0, updated=2.0, loss=2.5))
    finally:
        os.umask(old)
    path = tmp_path / status_record.STATUS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and os.listdir(tmp_path) == [status_record.STATUS_FILE]
    record = status_record.decode(path.read_bytes())
    assert (record.experiment, record.loss) == ("a", 2.5)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"started": 1, "updated": 2, "state": "runn', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"started": "today", "updated": 2, "state": "running"}', "field 'started' is 'today'"),
        ('{"started": 1, "updated": 2, "state": "running", "step": true}', "field 'step' is True"),
    ],
)
def test_a_reader_refuses_what_is_no_record(text: str, said: str) -> None:
    with pytest.raises(RecordError, match=said):
        status_record.decode(text)
