"""The ranks dashboard's data: records written by the product's RunWriter, read back by the plugin's
store (downsampling, relative step time, stragglers), then served by a real TensorBoard."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from tb_helpers import (
    assert_serves_its_module,
    layout,
    matrices,
    plugin_enabled,
    served_json,
    tensorboard_before_records,
    wait_for,
    write_ranks_run,
)

from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import ranks_store, ranks_views
from mindformers_tbplugin.viewer.ranks_store import RanksStore, RunRecords


@pytest.fixture(autouse=True)
def read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The store re-reads a run at most every RELOAD_SECS; tests append and read back at once.
    monkeypatch.setattr(ranks_store, "RELOAD_SECS", 0.0)
    monkeypatch.setattr(ranks_store, "DISCOVER_SECS", 0.0)


def one_run(logdir: Path, name: str = "job") -> RunRecords:
    runs = RanksStore(logdir).runs()
    assert list(runs) == [name]
    return runs[name]


def test_reads_every_record_and_the_layout_of_the_last_writer(tmp_path: Path) -> None:
    values = matrices(16, 30)
    write_ranks_run(tmp_path / "job", values[:20])
    write_ranks_run(tmp_path / "job", values[20:], first_step=210, rank_layout=layout(16, "/resumed/{rank}.log"))
    RunWriter(tmp_path / "scalars_only").close()  # a run without records is not listed
    run = one_run(tmp_path)
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


def test_step_time_is_relative_to_each_records_median(tmp_path: Path) -> None:
    values = matrices(16, 30)
    values[:, :, 0] *= np.linspace(1, 3, 30)[:, None]  # the whole job slows down: no rank stands out
    values[10:, 5, 0] *= 1.5  # rank 5 does, from record 10
    write_ranks_run(tmp_path / "job", values)
    grid = ranks_views.matrix(one_run(tmp_path), "step_time_ms", max_ranks=16, max_steps=30)
    cells = np.array(grid["values"], dtype=float)
    assert grid["rank_block"] == grid["step_block"] == 1 and cells.shape == (16, 30)
    assert grid["relative_to_median"] and grid["first_rank"] == list(range(16))
    assert grid["node"] == [0] * 8 + [1] * 8 and grid["node_names"] == ["host0", "host1"]
    assert np.all(np.abs(cells[:, :10] - 1) < 0.02)
    assert np.all(np.abs(cells[5, 10:] - 1.5) < 0.02)
    assert np.all(np.abs(np.delete(cells, 5, axis=0) - 1) < 0.02)
    assert abs(grid["max"] - 1.5) < 0.02 and grid["min"] > 0.97
    memory = np.array(ranks_views.matrix(one_run(tmp_path), "host_rss_gb")["values"], dtype=float)
    assert np.allclose(memory[:, 0], 20 + np.arange(16) / 16, atol=0.02)  # memory is shown as it is


def test_a_single_slow_cell_survives_downsampling(tmp_path: Path) -> None:
    values = matrices(2048, 300)
    values[170, 1234, 0] = 300.0  # one rank, one record: 3x the median
    values[:, 77, 1] = np.nan  # a rank without host memory
    write_ranks_run(tmp_path / "job", values)
    run = one_run(tmp_path)
    grid = ranks_views.matrix(run, "step_time_ms", max_ranks=64, max_steps=50)
    cells = np.array(grid["values"], dtype=float)
    assert (grid["rank_block"], grid["step_block"], cells.shape) == (32, 6, (64, 50))
    assert grid["first_rank"][:3] == [0, 32, 64] and grid["node"][:3] == [0, 4, 8]
    assert grid["steps"][:3] == [10, 70, 130]
    row, column = 1234 // 32, 170 // 6
    assert abs(cells[row, column] - 3) < 0.02 and abs(grid["max"] - 3) < 0.02
    assert np.delete(cells.ravel(), row * 50 + column).max() < 1.03
    # Blocks are the maximum of their cells: the float32 reference, computed the obvious way.
    medians = np.median(values[..., 0].astype(np.float16).astype(np.float32), axis=1)
    relative = values[..., 0].astype(np.float16).astype(np.float32) / medians[:, None]
    reference = relative.reshape(50, 6, 64, 32).max(axis=(1, 3)).T
    assert np.allclose(cells, reference, atol=1e-3)
    memory = np.array(ranks_views.matrix(run, "host_rss_gb", 2048, 300)["values"], dtype=float)
    assert np.isnan(memory[77]).all() and not np.isnan(np.delete(memory, 77, axis=0)).any()
    assert ranks_views.stragglers(run, limit=1)["ranks"][0]["rank"] == 1234


def test_stragglers_by_how_often_then_how_much_and_since_when(tmp_path: Path) -> None:
    values = matrices(16, 40)
    values[12:, 5, 0] *= 1.5  # the straggler, from record 12 (step 130)
    values[20:, 9, 0] *= 1.2  # slow too from step 210, but never the slowest
    write_ranks_run(tmp_path / "job", values)
    answer = ranks_views.stragglers(one_run(tmp_path), limit=3)
    first, second = answer["ranks"][:2]
    assert answer["slow_factor"] == 1.1 and answer["records"] == 40
    assert first == {
        "rank": 5,
        "node": 0,
        "node_name": "host0",
        "slowest": 28,
        "slow": 28,
        "mean_relative_when_slowest": pytest.approx(1.5, abs=0.02),
        "since_step": 130,
        "last_slow_step": 400,
    }
    assert (second["rank"], second["slow"], second["since_step"], second["node_name"]) == (9, 20, 210, "host1")
    assert len(answer["ranks"]) == 3  # the others were only the slowest of some records, by chance


def test_new_records_are_read_incrementally_and_the_cache_follows(tmp_path: Path) -> None:
    values = matrices(64, 50)
    values[30:, 40, 0] *= 2
    store = RanksStore(tmp_path)
    write_ranks_run(tmp_path / "job", values[:25])
    run = store.runs()["job"]
    before = ranks_views.matrix(run, "step_time_ms", max_ranks=8, max_steps=100)
    assert run.count == 25 and before["max"] < 1.05
    write_ranks_run(tmp_path / "job", values[25:], first_step=260)  # a second file in the same run
    assert store.run("job") is run and run.count == 50
    after = ranks_views.matrix(run, "step_time_ms", max_ranks=8, max_steps=100)
    run.cache.clear()
    assert after == ranks_views.matrix(run, "step_time_ms", max_ranks=8, max_steps=100)
    assert after["values"][5][30] == pytest.approx(2, abs=0.03)


def test_a_resume_rewrites_the_steps_after_its_checkpoint(tmp_path: Path) -> None:
    values = matrices(8, 30)
    write_ranks_run(tmp_path / "job", values[:20])  # steps 10..200
    values[15:, 3, 0] *= 2
    write_ranks_run(tmp_path / "job", values[15:], first_step=160)  # resumed from step 150
    run = one_run(tmp_path)
    assert run.steps[: run.count].tolist() == list(range(10, 310, 10))
    slowest = int((values[..., 0].astype(np.float16).argmax(axis=1) == 3).sum())  # 15 + by chance earlier
    assert ranks_views.stragglers(run)["ranks"][0] | {"mean_relative_when_slowest": 0} == {
        "rank": 3,
        "node": 0,
        "node_name": "host0",
        "slowest": slowest,
        "slow": 15,
        "mean_relative_when_slowest": 0,
        "since_step": 160,
        "last_slow_step": 300,
    }


def test_a_ranks_series_and_worker_log(tmp_path: Path) -> None:
    values = matrices(16, 30)
    values[:, 11, 3] = np.nan  # no device peak on that rank
    write_ranks_run(tmp_path / "job", values)
    run = one_run(tmp_path)
    series = ranks_views.rank_series(run, 11)
    assert series["worker_log"] == "/jobs/out/msrun_log/1/worker_11.log"
    assert (series["node"], series["node_name"], series["step_block"]) == (1, "host1", 1)
    assert series["steps"] == list(range(10, 310, 10))
    assert series["channels"]["step_time_ms"] == pytest.approx(values[:, 11, 0].tolist(), abs=0.06)
    assert series["channels"]["device_mem_peak_gb"] == [None] * 30
    assert series["medians"]["device_mem_allocated_gb"] == [30.0] * 30
    assert ranks_views.rank_series(run, 11, max_points=10)["steps"] == list(range(10, 310, 30))
    with pytest.raises(ValueError, match=r"rank 16 is not in 0\.\.15"):
        ranks_views.rank_series(run, 16)
    with pytest.raises(ValueError, match="unknown channel"):
        ranks_views.matrix(run, "loss")


def test_rows_follow_the_nodes_when_ranks_alternate_between_them(tmp_path: Path) -> None:
    values = matrices(8, 12)
    values[:, 3, 0] *= 1.5
    alternating = RankLayout(8, CHANNELS, 10, 1, tuple(rank % 2 for rank in range(8)), ("a", "b"), None)
    write_ranks_run(tmp_path / "job", values, rank_layout=alternating)
    run = one_run(tmp_path)
    grid = ranks_views.matrix(run, "step_time_ms")
    assert grid["first_rank"] == [0, 2, 4, 6, 1, 3, 5, 7] and grid["node"] == [0] * 4 + [1] * 4
    assert min(grid["values"][5]) > 1.4  # row 5 is rank 3
    assert ranks_views.matrix(run, "step_time_ms", max_ranks=2)["first_rank"] == [0, 1]
    assert ranks_views.rank_series(run, 3)["worker_log"] is None


def test_the_plugin_routes_answer_json_and_say_what_is_wrong(tmp_path: Path) -> None:
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    from mindformers_tbplugin.viewer.ranks_plugin import RanksPlugin

    RunWriter(tmp_path / "scalars_only").close()
    plugin = RanksPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert plugin.is_active() is False
    assert plugin.frontend_metadata().es_module_path == "/index.js"
    write_ranks_run(tmp_path / "job", matrices(8, 5))
    assert plugin.is_active() is True
    apps = plugin.get_plugin_apps()

    def get(route: str, query: str) -> tuple[int, object]:
        response = Client(apps[route], Response).get(route, query_string=query)
        return response.status_code, response.get_json()

    assert get("/runs", "")[1][0]["run"] == "job"
    assert len(get("/matrix", "run=job&max_ranks=4&max_steps=2")[1]["values"]) == 4
    assert get("/matrix", "run=job&max_ranks=many") == (
        400,
        {"error": "parameter 'max_ranks' must be an integer, got 'many'"},
    )
    assert get("/matrix", "run=job&channel=loss")[0] == 400
    assert get("/rank", "run=job") == (400, {"error": "missing parameter 'rank'"})
    assert get("/rank", "run=job&rank=8")[0] == 400
    assert get("/stragglers", "run=other") == (404, {"error": "no ranks records in run 'other'"})
    assert get("/stragglers", "")[0] == 400
    assert RanksPlugin(base_plugin.TBContext(logdir="")).is_active() is False  # --logdir_spec: no local folder


@pytest.mark.process
def test_a_real_tensorboard_serves_the_dashboard_once_records_exist(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    with tensorboard_before_records(logdir, "ranks") as port:  # listed, but inactive: no run holds records
        values = matrices(16, 20)
        values[5:, 6, 0] *= 1.4
        write_ranks_run(logdir / "job", values)
        assert wait_for(lambda: plugin_enabled(port, "ranks"), timeout=60) is True
        (run,) = wait_for(lambda: served_json(port, "/data/plugin/ranks/runs"))
        assert (run["run"], run["world_size"], run["records"], run["nodes"]) == ("job", 16, 20, 2)
        assert run["channels"] == list(CHANNELS)

        grid = served_json(port, "/data/plugin/ranks/matrix?run=job&channel=step_time_ms&max_ranks=8&max_steps=10")
        assert (grid["rows"], grid["columns"], grid["rank_block"], grid["step_block"]) == (8, 10, 2, 2)
        slow_row = np.array(grid["values"][3], dtype=float)  # ranks 6 and 7
        others = np.delete(np.array(grid["values"], dtype=float), 3, axis=0)
        assert slow_row[3:].min() > 1.3 and others.max() < 1.05
        slow = served_json(port, "/data/plugin/ranks/stragglers?run=job&limit=5")
        assert slow["ranks"][0]["rank"] == 6 and slow["ranks"][0]["since_step"] == 60
        rank = served_json(port, "/data/plugin/ranks/rank?run=job&rank=6")
        assert rank["worker_log"] == "/jobs/out/msrun_log/0/worker_6.log" and len(rank["steps"]) == 20
        assert served_json(port, "/data/plugin/ranks/matrix?run=nope") is None  # 404
        assert_serves_its_module(port, "ranks")
        started = time.monotonic()
        assert served_json(port, "/data/plugin/ranks/matrix?run=job") is not None
        assert time.monotonic() - started < 5
