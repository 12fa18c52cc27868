"""What the record plugins share (viewer/plugin_routes.py): integer query parameters and their 400
messages, and a plugin without a local logdir (``--logdir_spec``, a remote logdir) inactive with an
empty ``runs`` route and a 404 for every run."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.plugins import base_plugin
from werkzeug.test import Client, EnvironBuilder
from werkzeug.wrappers import Request, Response

from mindformers_tbplugin.viewer.plugin_routes import int_arg
from mindformers_tbplugin.viewer.ranks_plugin import RanksPlugin


def request(query: str) -> Request:
    return Request(EnvironBuilder(query_string=query).get_environ())


def test_an_integer_parameter_its_default_and_what_is_wrong() -> None:
    assert int_arg(request("limit=-3"), "limit", 20) == -3
    assert int_arg(request(""), "limit", 20) == 20
    with pytest.raises(ValueError, match=r"^missing parameter 'rank'$"):
        int_arg(request(""), "rank")
    with pytest.raises(ValueError, match=r"^parameter 'rank' must be an integer, got '1\.5'$"):
        int_arg(request("rank=1.5"), "rank", 0)


@pytest.mark.parametrize("logdir", ["", "missing"], ids=["logdir_spec", "not a folder"])
def test_without_a_local_logdir_the_plugin_is_inactive_and_answers_json(tmp_path: Path, logdir: str) -> None:
    plugin = RanksPlugin(base_plugin.TBContext(logdir=str(tmp_path / logdir) if logdir else ""))
    assert plugin.store is None and plugin.is_active() is False
    apps = plugin.get_plugin_apps()
    runs = Client(apps["/runs"], Response).get("/runs")
    assert (runs.status_code, runs.mimetype, runs.get_json()) == (200, "application/json", [])
    missing = Client(apps["/stragglers"], Response).get("/stragglers", query_string="run=job")
    assert (missing.status_code, missing.get_json()) == (404, {"error": "no ranks records in run 'job'"})
