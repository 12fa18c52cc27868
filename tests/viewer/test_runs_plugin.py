"""The runs TensorBoard plugin (viewer/runs_plugin.py): its route through werkzeug, then served by a real
TensorBoard (`mftb tensorboard`), and the dashboard in headless Chromium: the table, a filter, and a row's
link landing on TensorBoard's time series filtered to that run."""

from __future__ import annotations

import importlib.util
import json
import time
import urllib.request
from pathlib import Path

import pytest
from tb_helpers import CHROMEDRIVER, CHROMIUM, DEEP_TEXT_JS, assert_serves_its_module, mftb_tensorboard, open_chromium

from benchmarks.runs_listing import entry_point_shim
from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.status_record import StatusRecord
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import tensorboard_server

# Finds the plugin's iframe through TensorBoard's shadow roots.
PLUGIN_IFRAME_JS = """
const find = (root) => {
  for (const frame of root.querySelectorAll('iframe')) if ((frame.src || '').includes('name=runs')) return frame;
  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; }
  return null;
};
return find(document);
"""


def _runs(root: Path) -> None:
    """Two monitored runs with event files (so that TensorBoard's own dashboards list them too), and one
    whose training has not reached its first step (its record rewritten, no step: compiling)."""
    now = time.time()
    for name, state, loss in [("job_a/llama_1", status_record.RUNNING, 2.25), ("job_b/qwen_1", "failed", 3.5)]:
        writer = RunWriter(root / name)
        writer.add_scalars(1, {"train/loss": loss})
        writer.close()
        record = StatusRecord(
            experiment=name.split("/")[1].split("_")[0],
            owner="ann",
            started=now - 120,
            updated=now,
            progressed=now,
            state=state,
            step=1,
            total_steps=10,
            loss=loss,
        )
        status_record.write(root / name, record)
    (root / "job_c/deepseek_1").mkdir(parents=True)
    status_record.write(root / "job_c/deepseek_1", StatusRecord(experiment="deepseek", started=now - 900, updated=now))


def test_the_table_route_answers_the_rows_and_says_what_is_wrong(tmp_path: Path) -> None:
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    from mindformers_tbplugin.viewer.runs_plugin import RunsPlugin

    empty = RunsPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert empty.is_active() is False
    assert RunsPlugin(base_plugin.TBContext(logdir="")).is_active() is False  # --logdir_spec: no local folder
    _runs(tmp_path)
    plugin = RunsPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert plugin.is_active() is True
    apps = plugin.get_plugin_apps()

    def get(query: str) -> tuple[int, dict]:
        response = Client(apps["/table"], Response).get("/table", query_string=query)
        return response.status_code, response.get_json()

    status, body = get("")
    assert status == 200 and body["stale_after"] == status_record.DEFAULT_STALE_AFTER_SECS
    assert [(r["run"], r["state"], r["loss"]) for r in body["rows"]] == [
        ("job_a/llama_1", "running", 2.25),
        ("job_b/qwen_1", "failed", 3.5),
        ("job_c/deepseek_1", "starting", None),
    ]
    assert get("stale_after=soon") == (400, {"error": "parameter 'stale_after' must be a positive number, got 'soon'"})
    assert get("stale_after=0")[0] == 400


@pytest.mark.process
def test_a_real_tensorboard_serves_the_table_and_the_dashboard_links_each_run_to_its_charts(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _runs(root)
    env = entry_point_shim(tmp_path / "shim")  # until the environment's install holds the entry point
    port = str(tensorboard_server.free_port(18406))
    with mftb_tensorboard(root, "--port", port, env=env) as server:
        listing = tensorboard_server.get_json(server.port, "/data/plugins_listing", timeout=30)
        assert listing["runs"]["enabled"] is True
        assert listing["runs"]["tab_name"] == "Runs"
        assert_serves_its_module(server.port, "runs")
        url = f"http://127.0.0.1:{server.port}/data/plugin/runs/table?stale_after=600"
        with urllib.request.urlopen(url, timeout=30) as answer:
            body = json.loads(answer.read())
        assert [(r["run"], r["state"]) for r in body["rows"]] == [
            ("job_a/llama_1", "running"),
            ("job_b/qwen_1", "failed"),
            ("job_c/deepseek_1", "starting"),
        ]
        if not (CHROMIUM and CHROMEDRIVER and importlib.util.find_spec("selenium")):
            pytest.skip("the browser half needs chromium, chromedriver and selenium (`make browser`)")
        _dashboard_in_a_browser(server.port)


def _dashboard_in_a_browser(port: int) -> None:
    driver = open_chromium()
    try:
        driver.get(f"http://127.0.0.1:{port}/#runs")
        deadline = time.monotonic() + 90
        frame = None
        while frame is None and time.monotonic() < deadline:
            frame = driver.execute_script(PLUGIN_IFRAME_JS)
            time.sleep(0.5)
        assert frame is not None, driver.execute_script(DEEP_TEXT_JS)[:2000]
        driver.switch_to.frame(frame)
        rows = []
        while len(rows) < 3 and time.monotonic() < deadline:
            rows = driver.execute_script("return [...document.querySelectorAll('tr.row')].map((r) => r.innerText)")
            time.sleep(0.3)
        assert [row.split("\t")[0] for row in rows] == ["job_a/llama_1", "job_b/qwen_1", "job_c/deepseek_1"]
        assert "failed" in rows[1] and "1/10" in rows[1] and "3.5" in rows[1]
        assert "starting" in rows[2]
        driver.execute_script(
            "const s = document.querySelector('#state'); s.value = 'failed'; s.dispatchEvent(new Event('change'))"
        )
        assert driver.execute_script("return document.querySelectorAll('tr.row').length") == 1
        link = driver.find_element("css selector", "tr.row a.run")
        assert link.text == "job_b/qwen_1"
        link.click()  # target _top: the whole page goes to TensorBoard's time series, filtered to that run
        driver.switch_to.default_content()
        text = ""
        while time.monotonic() < deadline:
            text = driver.execute_script(DEEP_TEXT_JS)
            if "job_b/qwen_1" in text and "train /loss" in text:
                break
            time.sleep(0.5)
        assert "runFilter=%5Ejob_b%5C%2Fqwen_1%24" in driver.current_url and driver.current_url.endswith("#timeseries")
        assert "job_b/qwen_1" in text and "train /loss" in text  # the loss card of the run (group, then name)
        assert "job_a/llama_1" not in text  # the other run is filtered out of the run list
    finally:
        driver.quit()
