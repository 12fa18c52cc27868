"""The ranks TensorBoard plugin (viewer/ranks_plugin.py) as served: its JSON routes and their errors
through werkzeug, then a real TensorBoard serving the dashboard once records exist."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tb_helpers import (
    assert_serves_its_module,
    matrices,
    plugin_enabled,
    read_at_once,
    served_json,
    tensorboard_before_records,
    wait_for,
    write_ranks_run,
)

from mindformers_tbplugin.pipeline.rank_records import CHANNELS
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import ranks_store


@pytest.fixture(autouse=True)
def _read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read_at_once(monkeypatch, ranks_store)


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
    assert get("/matrix", "run=job&channel=temperature")[0] == 400
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
