"""The moe store (viewer/moe_store.py): expert-load records written by the product's RunWriter read back
with their layout (the placeholder before one comes, a resume's new layout), per record the statistics
pipeline/expert_load.py's LoadStatistics writes, a new dead fraction counting every record again, and
records read again from their files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tb_helpers import moe_layout, moe_records, moe_run, read_at_once, write_moe_run, write_tensor_records

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.expert_load import EXPERT_BIAS, LoadStatistics, RouterSet, layer_statistics
from mindformers_tbplugin.pipeline.expert_records import BIAS, LOAD, PLUGIN_NAME, TAG
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import moe_store, moe_views
from mindformers_tbplugin.viewer.moe_store import MoeStore


@pytest.fixture(autouse=True)
def _read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read_at_once(monkeypatch, moe_store)


def test_reads_every_record_with_the_layout_of_the_first(tmp_path: Path) -> None:
    values = moe_records(20)
    write_moe_run(tmp_path / "job", values, expert_layout=moe_layout(reads_per_record=3))
    RunWriter(tmp_path / "scalars_only").close()  # a run without records is not listed
    run = moe_run(tmp_path)
    assert run.count == 20 and run.steps[:20].tolist() == list(range(10, 210, 10))
    assert moe_views.run_summary("job", run) == {
        "run": "job",
        "records": 20,
        "first_step": 10,
        "last_step": 200,
        "layers": 4,
        "experts": 8,
        "groups": ["layers.1", "layers.2", "layers.3", "layers.4"],
        "routers": [EXPERT_BIAS] * 4,
        "top_k": 2,
        "channels": [LOAD, BIAS],
        "steps_per_read": 10,
        "reads_per_record": 3,
        "dead_fraction": 0.1,
    }
    shown = moe_views.record(run, step=55)  # between records: the one before
    assert (shown["index"], shown["step"], shown["records"]) == (4, 50, 20)
    assert np.allclose(np.array(shown["load"]), values[4, 0], atol=1e-3)
    assert np.allclose(np.array(shown["bias"]), values[4, 1], atol=2e-5)
    assert moe_views.record(run)["step"] == 200 and moe_views.record(run, step=0)["step"] == 10


def test_statistics_are_those_of_the_training_side(tmp_path: Path) -> None:
    """MaxVio, least load and dead experts as pipeline/expert_load.py's LoadStatistics writes them."""
    values = moe_records(3, layers=5, experts=16)[:, 0]
    values[1, 2, [3, 9]] = [0.05, 0.0]  # two dead experts
    values[1, 2, 4] += 0.05 + 1.0  # the load they lost
    values[1, 4] = np.nan  # a layer without a value in that record
    load16 = values.astype(np.float16)
    violation, low, dead = layer_statistics(load16.astype(np.float32), 0.1)
    groups = tuple(f"layers.{row}" for row in range(5))
    statistics = LoadStatistics(RouterSet(groups, 16, 2, (EXPERT_BIAS,) * 5), dead_fraction=0.1)
    for record in range(3):
        scalars = statistics.scalars(load16[record].astype(np.float64))
        for row, group in enumerate(groups):
            tags = [f"{metrics.MOE_PREFIX}{group}/{name}" for name in metrics.MOE_LAYER_STATISTICS]
            if record == 1 and row == 4:
                assert tags[0] not in scalars and np.isnan(violation[1, 4]) and not dead[1, 4].any()
                continue
            expected = [scalars[tag] for tag in tags]
            assert [violation[record, row], low[record, row], dead[record, row].sum()] == pytest.approx(expected)
    assert np.flatnonzero(dead[1, 2]).tolist() == [3, 9]


def test_a_resume_rewrites_the_steps_after_its_checkpoint_and_brings_its_layout(tmp_path: Path) -> None:
    values = moe_records(30)
    write_moe_run(tmp_path / "job", values[:20])  # steps 10..200
    values[15:, 0, 1, 6] = 0.0  # after the resume, expert 6 of layers.2 is dead
    resumed = moe_layout(reads_per_record=2)  # the same rows, a new record budget
    write_moe_run(tmp_path / "job", values[15:], first_step=160, expert_layout=resumed)  # from step 150
    run = moe_run(tmp_path)
    assert run.steps[: run.count].tolist() == list(range(10, 310, 10))
    assert run.layout == resumed  # the last record with a layout: the resumed writer's first
    (worst,) = moe_views.worst(run, limit=1)["at_step"]
    assert (worst["layer"], worst["dead"]) == ("layers.2", [{"expert": 6, "since_step": 160}])

    # Other layers, names or experts: only the records written under the new layout compare.
    wider = moe_records(5, experts=16, seed=1)
    write_moe_run(tmp_path / "job", wider, first_step=310, expert_layout=moe_layout(experts=16))
    run = moe_run(tmp_path)
    assert run.count == 5 and run.steps[:5].tolist() == [310, 320, 330, 340, 350]
    assert len(moe_views.record(run)["load"][0]) == 16 and moe_views.strip(run)["records"] == 5


def test_records_before_any_layout_get_numbered_rows_until_one_comes(tmp_path: Path) -> None:
    values = moe_records(10)
    write_tensor_records(tmp_path / "job", values[:5], TAG, PLUGIN_NAME, b"", 10, 10)  # its layout record lost
    run = moe_run(tmp_path)
    assert run.count == 5 and run.layout.groups == ("row 0", "row 1", "row 2", "row 3")
    write_moe_run(tmp_path / "job", values[5:], first_step=60)  # a resumed writer brings the layout
    run = moe_run(tmp_path)
    assert run.count == 10 and run.layout == moe_layout()  # the same shape: the earlier records stay


def test_a_new_dead_fraction_counts_every_record_again(tmp_path: Path) -> None:
    values = moe_records(10)
    values[:, 0, 0, 2] = 0.3  # under half the mean, over a tenth of it
    write_moe_run(tmp_path / "job", values[:6])
    store = MoeStore(tmp_path)
    run = store.run("job")
    assert moe_views.strip(run)["dead"][0] == [0] * 6
    write_moe_run(tmp_path / "job", values[6:], first_step=70, expert_layout=moe_layout(dead_fraction=0.5))
    assert store.run("job") is run and run.count == 10
    assert moe_views.strip(run)["dead"][0] == [1] * 10
    assert moe_views.worst(run)["at_step"][0]["dead"] == [{"expert": 2, "since_step": 10}]


def test_a_record_no_longer_in_its_file_is_a_value_error(tmp_path: Path) -> None:
    """A ValueError: what the plugin's routes answer with a 400 and its message."""
    write_moe_run(tmp_path / "job", moe_records(5))
    run = moe_run(tmp_path)
    (path,) = {where.path for where in run.where}
    path.write_bytes(path.read_bytes()[:100])  # the file replaced by a shorter one
    with pytest.raises(ValueError, match="the record of step 50 can no longer be read"):
        run.record(4)
