"""The moe TensorBoard plugin (viewer/moe_plugin.py) as served: its JSON routes and their errors through
werkzeug, then a real TensorBoard serving the dashboard once records exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from tb_helpers import (
    assert_serves_its_module,
    moe_records,
    plugin_enabled,
    read_at_once,
    served_json,
    tensorboard_before_records,
    wait_for,
    write_moe_run,
)

from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import moe_store


@pytest.fixture(autouse=True)
def _read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read_at_once(monkeypatch, moe_store)


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
    write_moe_run(tmp_path / "job", moe_records(5))
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


@pytest.mark.process
def test_a_real_tensorboard_serves_the_dashboard_once_records_exist(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    with tensorboard_before_records(logdir, "moe") as port:  # listed, but inactive: no run holds records
        values = moe_records(20, layers=6, experts=16)
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
