"""What the moe routes answer (viewer/moe_views.py), from records written by the product's RunWriter: one
record with its layers' statistics, the layer x step strip downsampled by block maxima, the worst
layers with each dead expert's first step, layers without a value, and the benchmarks' synthetic run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tb_helpers import moe_records, moe_run, read_at_once, write_moe_run

from benchmarks import synthetic_moe
from mindformers_tbplugin.viewer import moe_store, moe_views


@pytest.fixture(autouse=True)
def _read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read_at_once(monkeypatch, moe_store)


def test_layers_without_a_value_are_null_and_do_not_break_a_dead_streak(tmp_path: Path) -> None:
    values = moe_records(12, channels=1)
    values[4:, 0, 3, 5] = 0.0  # layers.4: expert 5 dead from step 50
    values[7, 0, 3] = np.nan  # ... and no value for the layer at step 80
    values[:, 0, 1] = np.nan  # layers.2 never has a value
    write_moe_run(tmp_path / "job", values)
    run = moe_run(tmp_path)
    shown = moe_views.record(run, step=80)
    assert "bias" not in shown and shown["load"][3] == [None] * 8 and shown["load"][1] == [None] * 8
    assert shown["max_violation"][3] is None and shown["dead"] == [0, None, 0, None]
    strip = moe_views.strip(run)
    assert strip["dead"][3] == [0] * 4 + [1] * 3 + [None] + [1] * 4 and strip["dead"][1] == [None] * 12
    assert strip["max_violation"][1] == [None] * 12
    answer = moe_views.worst(run)
    assert {entry["layer"] for entry in answer["at_step"]} == {"layers.1", "layers.3", "layers.4"}  # with a value
    assert answer["at_step"][0]["layer"] == "layers.4"  # the one with a dead expert first
    assert answer["at_step"][0]["dead"] == [{"expert": 5, "since_step": 50}]
    no_value = next(entry for entry in answer["over_run"] if entry["layer"] == "layers.2")
    assert no_value["mean_max_violation"] is None and no_value["records_with_dead"] == 0


def test_the_strip_keeps_a_single_dead_expert_visible_when_downsampled(tmp_path: Path) -> None:
    values = moe_records(300, layers=6, experts=64, channels=1)
    values[170, 0, 2, 40] = 0.0  # one expert, one record
    values[171, 0, 2, 41] = 9.0  # one overloaded expert in the next one
    write_moe_run(tmp_path / "job", values)
    run = moe_run(tmp_path)
    strip = moe_views.strip(run, max_steps=50)
    assert (strip["step_block"], strip["rows"], strip["columns"]) == (6, 6, 50)
    assert strip["steps"][:3] == [10, 70, 130] and len(strip["record_steps"]) == 300
    dead = np.array(strip["dead"])
    assert dead[2, 170 // 6] == 1 and dead.sum() == 1
    # Blocks show their largest MaxVio: the float16 records' reference, computed the obvious way.
    load = values[:, 0].astype(np.float16).astype(np.float32)
    reference = (load.max(axis=-1) - 1).reshape(50, 6, 6).max(axis=1).T
    assert np.allclose(np.array(strip["max_violation"], dtype=float), reference, atol=1e-3)
    assert strip["max"] == pytest.approx(reference.max(), abs=1e-3) and reference[2, 171 // 6] > 7
    # A click on that block shows the record where layers.3 was worst: the dead expert's.
    assert (
        moe_views.record(run, step=strip["steps"][28], until=strip["steps"][29] - 10, layer="layers.3")["step"] == 1710
    )


def test_the_worst_layers_name_dead_experts_since_when_and_the_recovered(tmp_path: Path) -> None:
    values = moe_records(40)
    values[12:, 0, 2, [1, 6]] = 0.0  # layers.3: experts 1 and 6 dead from step 130
    values[12:, 0, 2, 3] = 3.0  # expert 3 takes their share
    values[5:9, 0, 0, 4] = 0.02  # layers.1: expert 4 dead for four records, then alive again
    write_moe_run(tmp_path / "job", values)
    run = moe_run(tmp_path)
    answer = moe_views.worst(run, limit=2)
    assert (answer["step"], answer["records"], answer["dead_fraction"]) == (400, 40, 0.1)
    first = answer["at_step"][0]
    assert first["layer"] == "layers.3" and first["dead_count"] == 2
    assert first["dead"] == [{"expert": 1, "since_step": 130}, {"expert": 6, "since_step": 130}]
    assert first["busiest"][0]["expert"] == 3 and first["max_violation"] == pytest.approx(2.0, abs=0.01)
    assert first["min_load"] == 0.0
    over = answer["over_run"]
    assert [entry["layer"] for entry in over] == ["layers.3", "layers.1"]
    assert over[0]["records_with_dead"] == 28 and over[0]["dead_now"] == first["dead"]
    assert over[0]["dead_now_count"] == 2 and over[1]["dead_now_count"] == 0
    assert over[1]["dead_now"] == [] and over[1]["records_with_dead"] == 4
    assert over[1]["dead_before"] == [{"expert": 4, "records": 4, "first_step": 60, "last_step": 90}]
    earlier = moe_views.worst(run, step=70)
    assert earlier["at_step"][0]["layer"] == "layers.1"
    assert earlier["at_step"][0]["dead"] == [{"expert": 4, "since_step": 60}]


def test_the_benchmarks_generator_plants_what_the_worst_list_finds(tmp_path: Path) -> None:
    made = synthetic_moe.generate(tmp_path, layers=8, experts=16, records=30)
    assert made.planted_layer == "layers.8" and made.layout.groups[-1] == "mtp.layers.0"
    run = moe_run(tmp_path, made.run_dir.name)
    assert run.layout == made.layout and run.steps[: run.count].tolist() == [made.step_of(r) for r in range(30)]
    first = moe_views.worst(run)["at_step"][0]
    since = made.step_of(made.dead_from_record)
    assert first["layer"] == made.planted_layer and first["busiest"][0]["expert"] == made.hot_expert
    assert first["dead"] == [{"expert": e, "since_step": since} for e in sorted(made.dead_experts)]
    bias = np.array(moe_views.record(run)["bias"], dtype=float)[made.planted_row]
    assert bias[made.hot_expert] < bias.mean() < bias[list(made.dead_experts)].min()  # the opposite way
