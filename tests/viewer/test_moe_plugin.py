"""The moe dashboard's data: expert-load records written by the product's RunWriter, read back by the
plugin's store (layouts, resumes, NaN layers, the strip's downsampling, the worst layers), then served by
a real TensorBoard."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tb_helpers import (
    assert_serves_its_module,
    plugin_enabled,
    served_json,
    tensorboard_before_records,
    wait_for,
    write_tensor_records,
)

from benchmarks import synthetic_moe
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.expert_load import EXPERT_BIAS, LoadStatistics, RouterSet, layer_statistics
from mindformers_tbplugin.pipeline.expert_records import BIAS, LOAD, PLUGIN_NAME, TAG, ExpertLayout
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import moe_store, moe_views
from mindformers_tbplugin.viewer.moe_store import MoeRun, MoeStore


def layout(layers: int = 4, experts: int = 8, channels: tuple[str, ...] = (LOAD, BIAS), **changes) -> ExpertLayout:
    fields = {
        "groups": tuple(f"layers.{row + 1}" for row in range(layers)),
        "experts": experts,
        "top_k": 2,
        "routers": (EXPERT_BIAS,) * layers,
        "channels": channels,
        "steps_per_read": 10,
        "reads_per_record": 1,
        "dead_fraction": 0.1,
    }
    return ExpertLayout(**(fields | changes))


def records(count: int, layers: int = 4, experts: int = 8, channels: int = 2, seed: int = 0) -> np.ndarray:
    """(records, channels, layers, experts): loads within 0.8..1.2 of the mean, bias in +-0.01."""
    rng = np.random.default_rng(seed)
    load = rng.uniform(0.8, 1.2, (count, layers, experts))
    load /= load.mean(axis=-1, keepdims=True)
    bias = rng.uniform(-0.01, 0.01, (count, layers, experts))
    return np.stack([load, bias][:channels], axis=1)


def write_moe_run(
    run_dir: Path, values: np.ndarray, first_step: int = 10, every: int = 10, expert_layout: ExpertLayout | None = None
) -> None:
    """One writer's records, as the monitor writes them: the layout in the first one only."""
    _, channels, layers, experts = values.shape
    expert_layout = expert_layout or layout(layers, experts, (LOAD, BIAS)[:channels])
    write_tensor_records(run_dir, values, TAG, PLUGIN_NAME, expert_layout.content(), first_step, every)


@pytest.fixture(autouse=True)
def read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The store re-reads a run at most every RELOAD_SECS; tests append and read back at once.
    monkeypatch.setattr(moe_store, "RELOAD_SECS", 0.0)
    monkeypatch.setattr(moe_store, "DISCOVER_SECS", 0.0)


def one_run(logdir: Path, name: str = "job") -> MoeRun:
    runs = MoeStore(logdir).runs()
    assert list(runs) == [name]
    return runs[name]


def test_reads_every_record_with_the_layout_of_the_first(tmp_path: Path) -> None:
    values = records(20)
    write_moe_run(tmp_path / "job", values, expert_layout=layout(reads_per_record=3))
    RunWriter(tmp_path / "scalars_only").close()  # a run without records is not listed
    run = one_run(tmp_path)
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
    values = records(3, layers=5, experts=16)[:, 0]
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
    values = records(30)
    write_moe_run(tmp_path / "job", values[:20])  # steps 10..200
    values[15:, 0, 1, 6] = 0.0  # after the resume, expert 6 of layers.2 is dead
    resumed = layout(reads_per_record=2)  # the same rows, a new record budget
    write_moe_run(tmp_path / "job", values[15:], first_step=160, expert_layout=resumed)  # from step 150
    run = one_run(tmp_path)
    assert run.steps[: run.count].tolist() == list(range(10, 310, 10))
    assert run.layout == resumed  # the last record with a layout: the resumed writer's first
    (worst,) = moe_views.worst(run, limit=1)["at_step"]
    assert (worst["layer"], worst["dead"]) == ("layers.2", [{"expert": 6, "since_step": 160}])

    # Other layers, names or experts: only the records written under the new layout compare.
    wider = records(5, experts=16, seed=1)
    write_moe_run(tmp_path / "job", wider, first_step=310, expert_layout=layout(experts=16))
    run = one_run(tmp_path)
    assert run.count == 5 and run.steps[:5].tolist() == [310, 320, 330, 340, 350]
    assert len(moe_views.record(run)["load"][0]) == 16 and moe_views.strip(run)["records"] == 5


def test_records_before_any_layout_get_numbered_rows_until_one_comes(tmp_path: Path) -> None:
    values = records(10)
    write_tensor_records(tmp_path / "job", values[:5], TAG, PLUGIN_NAME, b"", 10, 10)  # its layout record lost
    run = one_run(tmp_path)
    assert run.count == 5 and run.layout.groups == ("row 0", "row 1", "row 2", "row 3")
    write_moe_run(tmp_path / "job", values[5:], first_step=60)  # a resumed writer brings the layout
    run = one_run(tmp_path)
    assert run.count == 10 and run.layout == layout()  # the same shape: the earlier records stay


def test_a_new_dead_fraction_counts_every_record_again(tmp_path: Path) -> None:
    values = records(10)
    values[:, 0, 0, 2] = 0.3  # under half the mean, over a tenth of it
    write_moe_run(tmp_path / "job", values[:6])
    store = MoeStore(tmp_path)
    run = store.run("job")
    assert moe_views.strip(run)["dead"][0] == [0] * 6
    write_moe_run(tmp_path / "job", values[6:], first_step=70, expert_layout=layout(dead_fraction=0.5))
    assert store.run("job") is run and run.count == 10
    assert moe_views.strip(run)["dead"][0] == [1] * 10
    assert moe_views.worst(run)["at_step"][0]["dead"] == [{"expert": 2, "since_step": 10}]


def test_layers_without_a_value_are_null_and_do_not_break_a_dead_streak(tmp_path: Path) -> None:
    values = records(12, channels=1)
    values[4:, 0, 3, 5] = 0.0  # layers.4: expert 5 dead from step 50
    values[7, 0, 3] = np.nan  # ... and no value for the layer at step 80
    values[:, 0, 1] = np.nan  # layers.2 never has a value
    write_moe_run(tmp_path / "job", values)
    run = one_run(tmp_path)
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
    values = records(300, layers=6, experts=64, channels=1)
    values[170, 0, 2, 40] = 0.0  # one expert, one record
    values[171, 0, 2, 41] = 9.0  # one overloaded expert in the next one
    write_moe_run(tmp_path / "job", values)
    run = one_run(tmp_path)
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
    values = records(40)
    values[12:, 0, 2, [1, 6]] = 0.0  # layers.3: experts 1 and 6 dead from step 130
    values[12:, 0, 2, 3] = 3.0  # expert 3 takes their share
    values[5:9, 0, 0, 4] = 0.02  # layers.1: expert 4 dead for four records, then alive again
    write_moe_run(tmp_path / "job", values)
    run = one_run(tmp_path)
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
    run = one_run(tmp_path, made.run_dir.name)
    assert run.layout == made.layout and run.steps[: run.count].tolist() == [made.step_of(r) for r in range(30)]
    first = moe_views.worst(run)["at_step"][0]
    since = made.step_of(made.dead_from_record)
    assert first["layer"] == made.planted_layer and first["busiest"][0]["expert"] == made.hot_expert
    assert first["dead"] == [{"expert": e, "since_step": since} for e in sorted(made.dead_experts)]
    bias = np.array(moe_views.record(run)["bias"], dtype=float)[made.planted_row]
    assert bias[made.hot_expert] < bias.mean() < bias[list(made.dead_experts)].min()  # the opposite way


def test_the_plugin_routes_answer_json_and_say_what_is_wrong(tmp_path: Path) -> None:
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    from mindformers_tbplugin.viewer.moe_plugin import MoePlugin

    RunWriter(tmp_path / "scalars_only").close()
    plugin = MoePlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert plugin.is_active() is False
    assert plugin.frontend_metadata().es_module_path == "/index.js"
    assert plugin.frontend_metadata().tab_name == "MoE"
    write_moe_run(tmp_path / "job", records(5))
    assert plugin.is_active() is True
    apps = plugin.get_plugin_apps()

    def get(route: str, query: str) -> tuple[int, object]:
        response = Client(apps[route], Response).get(route, query_string=query)
        return response.status_code, response.get_json()

    assert get("/runs", "")[1][0]["groups"] == ["layers.1", "layers.2", "layers.3", "layers.4"]
    assert get("/record", "run=job&step=20")[1]["step"] == 20
    assert get("/record", "run=job&step=soon") == (400, {"error": "parameter 'step' must be an integer, got 'soon'"})
    assert get("/record", "run=job&layer=layers.9") == (
        400,
        {"error": "unknown layer 'layers.9'; one of layers.1 .. layers.4"},
    )
    assert get("/strip", "run=job&max_steps=2")[1]["columns"] == 2
    assert get("/strip", "run=job&max_steps=all")[0] == 400
    assert len(get("/worst", "run=job&limit=1")[1]["at_step"]) == 1
    assert get("/worst", "run=other") == (404, {"error": "no moe records in run 'other'"})
    assert get("/worst", "") == (400, {"error": "missing parameter 'run'"})
    assert MoePlugin(base_plugin.TBContext(logdir="")).is_active() is False  # --logdir_spec: no local folder


def test_a_record_no_longer_in_its_file_is_a_400(tmp_path: Path) -> None:
    write_moe_run(tmp_path / "job", records(5))
    run = one_run(tmp_path)
    (path,) = {where.path for where in run.where}
    path.write_bytes(path.read_bytes()[:100])  # the file replaced by a shorter one
    with pytest.raises(ValueError, match="the record of step 50 can no longer be read"):
        moe_views.record(run)


@pytest.mark.process
def test_a_real_tensorboard_serves_the_dashboard_once_records_exist(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    with tensorboard_before_records(logdir, "moe") as port:  # listed, but inactive: no run holds records
        values = records(20, layers=6, experts=16)
        values[8:, 0, 4, 11] = 0.0
        write_moe_run(logdir / "job", values)
        assert wait_for(lambda: plugin_enabled(port, "moe"), timeout=60) is True
        (run,) = wait_for(lambda: served_json(port, "/data/plugin/moe/runs"))
        assert (run["run"], run["layers"], run["experts"], run["records"]) == ("job", 6, 16, 20)

        shown = served_json(port, "/data/plugin/moe/record?run=job&step=90")
        assert shown["step"] == 90 and len(shown["load"]) == 6 and shown["dead"][4] == 1
        strip = served_json(port, "/data/plugin/moe/strip?run=job&max_steps=10")
        assert (strip["rows"], strip["columns"], strip["step_block"]) == (6, 10, 2)
        assert strip["dead"][4] == [0] * 4 + [1] * 6
        worst = served_json(port, "/data/plugin/moe/worst?run=job")
        assert worst["at_step"][0]["dead"] == [{"expert": 11, "since_step": 90}]
        assert served_json(port, "/data/plugin/moe/record?run=nope") is None  # 404
        assert_serves_its_module(port, "moe")
