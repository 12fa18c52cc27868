"""What the ranks routes answer (viewer/ranks_views.py), from records written by the product's RunWriter:
the heatmap relative to each record's median and downsampled by block maxima, in node order, the
stragglers, one rank's series and worker log, and the cached reductions following new records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tb_helpers import matrices, ranks_run, read_at_once, write_ranks_run

from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout
from mindformers_tbplugin.viewer import ranks_store, ranks_views
from mindformers_tbplugin.viewer.ranks_store import RanksStore


@pytest.fixture(autouse=True)
def _read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read_at_once(monkeypatch, ranks_store)


def test_step_time_is_relative_to_each_records_median(tmp_path: Path) -> None:
    values = matrices(16, 30)
    values[:, :, 0] *= np.linspace(1, 3, 30)[:, None]  # the whole job slows down: no rank stands out
    values[10:, 5, 0] *= 1.5  # rank 5 does, from record 10
    write_ranks_run(tmp_path / "job", values)
    grid = ranks_views.matrix(ranks_run(tmp_path), "step_time_ms", max_ranks=16, max_steps=30)
    cells = np.array(grid["values"], dtype=float)
    assert grid["rank_block"] == grid["step_block"] == 1 and cells.shape == (16, 30)
    assert grid["relative_to_median"] and grid["first_rank"] == list(range(16))
    assert grid["node"] == [0] * 8 + [1] * 8 and grid["node_names"] == ["host0", "host1"]
    assert np.all(np.abs(cells[:, :10] - 1) < 0.02)
    assert np.all(np.abs(cells[5, 10:] - 1.5) < 0.02)
    assert np.all(np.abs(np.delete(cells, 5, axis=0) - 1) < 0.02)
    assert abs(grid["max"] - 1.5) < 0.02 and grid["min"] > 0.97
    memory = np.array(ranks_views.matrix(ranks_run(tmp_path), "host_rss_gb")["values"], dtype=float)
    assert np.allclose(memory[:, 0], 20 + np.arange(16) / 16, atol=0.02)  # memory is shown as it is


def test_a_single_slow_cell_survives_downsampling(tmp_path: Path) -> None:
    values = matrices(2048, 300)
    values[170, 1234, 0] = 300.0  # one rank, one record: 3x the median
    values[:, 77, 1] = np.nan  # a rank without host memory
    write_ranks_run(tmp_path / "job", values)
    run = ranks_run(tmp_path)
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
    answer = ranks_views.stragglers(ranks_run(tmp_path), limit=3)
    first, second = answer["ranks"][:2]
    assert answer["slow_factor"] == 1.1 and answer["records"] == 40
    assert first == {
        "rank": 5,
        "node": 0,
        "node_name": "host0",
        "slowest": 28,
        "slow": 28,
        "mean_relative_when_slowest": pytest.approx(1.5, abs=0.02),
        "mean_relative_when_slow": pytest.approx(1.5, abs=0.02),
        "since_step": 130,
        "last_slow_step": 400,
        "slow_node": None,
    }
    assert (second["rank"], second["slow"], second["since_step"], second["node_name"]) == (9, 20, 210, "host1")
    relative = _relative_step_times(values)
    assert second["mean_relative_when_slow"] == pytest.approx(float(relative[20:, 9].mean()), abs=1e-4)
    slowest = relative.argmax(axis=1) == 9  # by chance, in the few records where rank 5 was not slow yet
    assert second["slowest"] == slowest.sum() > 0
    assert second["mean_relative_when_slowest"] == pytest.approx(float(relative[slowest, 9].mean()), abs=1e-4)
    assert len(answer["ranks"]) == 3  # the others were only the slowest of some records, by chance
    assert answer["nodes"] == []  # one or two slow ranks are not a slow node


def test_a_node_whose_ranks_are_all_slow_is_named(tmp_path: Path) -> None:
    values = matrices(32, 40)  # 4 nodes of 8 ranks
    values[10:20, 16:24, 0] *= 1.3  # node 2 (ranks 16-23), records 10-19 (steps 110-200)
    values[25:27, 24:31, 0] *= 1.3  # 7 of node 3's 8 ranks: not the whole node
    values[30:, 8:16, 0] *= 1.25  # node 1 from record 30 (step 310) on, and one rank of it alone before
    values[5:30, 9, 0] *= 1.4
    write_ranks_run(tmp_path / "job", values)
    answer = ranks_views.stragglers(ranks_run(tmp_path), limit=5)
    relative = _relative_step_times(values)
    node_1 = float(np.median(relative[30:, 8:16], axis=1).mean())
    node_2 = float(np.median(relative[10:20, 16:24], axis=1).mean())
    assert answer["nodes"] == [
        {"node": 1, "node_name": "host1", "ranks": 8, "records": 10, "mean_relative": pytest.approx(node_1, abs=1e-4),
         "since_step": 310, "last_slow_step": 400},
        {"node": 2, "node_name": "host2", "ranks": 8, "records": 10, "mean_relative": pytest.approx(node_2, abs=1e-4),
         "since_step": 110, "last_slow_step": 200},
    ]  # fmt: skip
    assert node_1 == pytest.approx(1.25, abs=0.02) and node_2 == pytest.approx(1.3, abs=0.02)
    assert answer["ranks"][0]["rank"] == 9  # the slow rank keeps its place among the ranks
    # A rank slow because its host is: never the slowest (rank 9 is, at 1.4x), its slowness and its node's.
    everyone = ranks_views.stragglers(ranks_run(tmp_path), limit=100)["ranks"]
    (rank_17,) = [entry for entry in everyone if entry["rank"] == 17]
    assert rank_17 == {
        "rank": 17,
        "node": 2,
        "node_name": "host2",
        "slowest": 0,
        "slow": 10,
        "mean_relative_when_slowest": None,
        "mean_relative_when_slow": pytest.approx(float(relative[10:20, 17].mean()), abs=1e-4),
        "since_step": 110,
        "last_slow_step": 200,
        "slow_node": {"records": 10, "mean_relative": pytest.approx(node_2, abs=1e-4)},
    }
    (rank_24,) = [entry for entry in everyone if entry["rank"] == 24]  # 7 of node 3's 8 ranks: not a slow node
    assert (rank_24["slow"], rank_24["slow_node"]) == (2, None)


def _relative_step_times(values: np.ndarray) -> np.ndarray:
    """(records, ranks): each rank's step time over the record's median, from the float16 values written."""
    step_times = values[..., 0].astype(np.float16).astype(np.float32)
    return step_times / np.median(step_times, axis=1, keepdims=True)


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


def test_a_ranks_series_and_worker_log(tmp_path: Path) -> None:
    values = matrices(16, 30)
    values[:, 11, 3] = np.nan  # no device peak on that rank
    write_ranks_run(tmp_path / "job", values)
    run = ranks_run(tmp_path)
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
        ranks_views.matrix(run, "temperature")


def test_rows_follow_the_nodes_when_ranks_alternate_between_them(tmp_path: Path) -> None:
    values = matrices(8, 12)
    values[:, 3, 0] *= 1.5
    alternating = RankLayout(8, CHANNELS, 10, 1, tuple(rank % 2 for rank in range(8)), ("a", "b"), None)
    write_ranks_run(tmp_path / "job", values, rank_layout=alternating)
    run = ranks_run(tmp_path)
    grid = ranks_views.matrix(run, "step_time_ms")
    assert grid["first_rank"] == [0, 2, 4, 6, 1, 3, 5, 7] and grid["node"] == [0] * 4 + [1] * 4
    assert min(grid["values"][5]) > 1.4  # row 5 is rank 3
    assert ranks_views.matrix(run, "step_time_ms", max_ranks=2)["first_rank"] == [0, 1]
    assert ranks_views.rank_series(run, 3)["worker_log"] is None
