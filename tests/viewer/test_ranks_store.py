"""The ranks store (viewer/ranks_store.py): records written by the product's RunWriter read back from the
event files with the layout of the last writer (a run without records not listed), and a resume's
records replacing the steps after its checkpoint (the straggler tallies recounted)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tb_helpers import layout, matrices, ranks_run, read_at_once, write_ranks_run

from mindformers_tbplugin.pipeline.rank_records import CHANNELS
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import ranks_store, ranks_views


@pytest.fixture(autouse=True)
def _read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read_at_once(monkeypatch, ranks_store)


def test_reads_every_record_and_the_layout_of_the_last_writer(tmp_path: Path) -> None:
    values = matrices(16, 30)
    write_ranks_run(tmp_path / "job", values[:20])
    write_ranks_run(tmp_path / "job", values[20:], first_step=210, rank_layout=layout(16, "/resumed/{rank}.log"))
    RunWriter(tmp_path / "scalars_only").close()  # a run without records is not listed
    run = ranks_run(tmp_path)
    assert run.count == 30 and run.world_size == 16
    assert run.steps[: run.count].tolist() == list(range(10, 310, 10))
    assert ranks_views.worker_log(run, 3) == "/resumed/3.log"
    summary = ranks_views.run_summary("job", run)
    assert summary | {"channels": None} == {
        "run": "job",
        "world_size": 16,
        "records": 30,
        "channels": None,
        "nodes": 2,
        "first_step": 10,
        "last_step": 300,
        "steps_per_interval": 10,
        "intervals_per_record": 1,
    }
    assert summary["channels"] == list(CHANNELS)


def test_a_resume_rewrites_the_steps_after_its_checkpoint(tmp_path: Path) -> None:
    values = matrices(8, 30)
    write_ranks_run(tmp_path / "job", values[:20])  # steps 10..200
    values[15:, 3, 0] *= 2
    write_ranks_run(tmp_path / "job", values[15:], first_step=160)  # resumed from step 150
    run = ranks_run(tmp_path)
    assert run.steps[: run.count].tolist() == list(range(10, 310, 10))
    slowest = int((values[..., 0].astype(np.float16).argmax(axis=1) == 3).sum())  # 15 + by chance earlier
    assert ranks_views.stragglers(run)["ranks"][0] | {"mean_relative_when_slowest": 0} == {
        "rank": 3,
        "node": 0,
        "node_name": "host0",
        "slowest": slowest,
        "slow": 15,
        "mean_relative_when_slowest": 0,
        "mean_relative_when_slow": pytest.approx(2.0, abs=0.03),  # the rewritten records only
        "since_step": 160,
        "last_slow_step": 300,
        "slow_node": None,
    }


def test_records_written_before_the_loss_channel_still_show_without_it(tmp_path: Path) -> None:
    values = matrices(8, 5)
    old_layout = replace(layout(8), channels=CHANNELS[:4])
    write_ranks_run(tmp_path / "job", values[..., :4], rank_layout=old_layout)
    run = ranks_run(tmp_path)
    assert run.count == 5
    step_times = ranks_views.matrix(run, "step_time_ms")
    assert step_times["rows"] == 8 and step_times["max"] is not None
    assert ranks_views.matrix(run, "loss")["max"] is None  # no values: an empty channel, not an error
