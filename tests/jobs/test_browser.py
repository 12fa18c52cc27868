"""A real tiny training seen in a real browser: `mftb tensorboard` + headless Chromium on the scalars dashboard.

Needs Debian's chromium and chromium-driver (`make browser` installs them where it can); skips otherwise.
With MFTB_SCREENSHOTS=folder the pictures are also copied there (`make screenshot` uses them for the README).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, run_dirs, subprocess_env, train, write_tiny_config
from tb_helpers import (
    CHROMEDRIVER,
    CHROMIUM,
    DEEP_COUNT_JS,
    DEEP_TEXT_JS,
    mftb_tensorboard,
    open_chromium,
    plugin_enabled,
    served_json,
)

from mindformers_tbplugin.viewer import tensorboard_server

_MISSING = [
    name
    for name, present in (
        ("chromium", CHROMIUM),
        ("chromedriver (chromium-driver)", CHROMEDRIVER),
        ("selenium", importlib.util.find_spec("selenium")),
    )
    if not present
]
pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        bool(_MISSING),
        reason=f"browser test skipped: {', '.join(_MISSING)} not installed (`make browser` installs them as root)",
    ),
]

# Line paths drawn in the charts, with their number of vertices.
LINE_VERTICES_JS = DEEP_COUNT_JS.replace(
    "count += root.querySelectorAll(selector).length;",
    "for (const p of root.querySelectorAll(selector)) count = Math.max(count, (p.getAttribute('d') || '')"
    ".split('L').length - 1);",
)


# For the README pictures: log folders that read like a user's, not the test's temporary ones.
SCREENSHOT_ROOT = Path(tempfile.gettempdir()) / "mftb-demo"
LAUNCHER = REPO / "scripts" / "msrun_launch.sh"
DP2_CONFIG = REPO / "configs" / "tiny" / "llama_tiny_cpu_dp2.yaml"


def _output_root(tmp_path: Path, name: str) -> Path:
    """Where a test's training writes: a fixed, readable folder when the pictures are wanted for the README."""
    if not os.environ.get("MFTB_SCREENSHOTS"):
        return tmp_path / name
    shutil.rmtree(SCREENSHOT_ROOT / name, ignore_errors=True)
    return SCREENSHOT_ROOT / name


def _keep_picture(picture: Path) -> None:
    assert picture.stat().st_size > 20_000  # a real picture, not a blank page
    if os.environ.get("MFTB_SCREENSHOTS"):
        shutil.copyfile(picture, Path(os.environ["MFTB_SCREENSHOTS"]) / picture.name)


def test_scalars_dashboard_shows_the_run_and_its_loss_curve(tmp_path: Path, tiny_data: Path) -> None:
    log_root = _output_root(tmp_path, "output") / "tensorboard"
    callbacks = [
        {"type": "MFLossMonitor"},
        {"type": "TensorBoardMonitor", "log_dir": str(log_root), "experiment": "llama_tiny"},
    ]
    run = train(write_tiny_config(tmp_path, tiny_data, callbacks, num_samples=128), tmp_path)
    assert run.returncode == 0, run.output[-5000:]
    (run_dir,) = run_dirs(log_root)
    run_name = run_dir.name
    screenshot = tmp_path / "tensorboard-scalars.png"

    with mftb_tensorboard(log_root, "--port", str(tensorboard_server.free_port(18306)), "--all_points") as server:
        driver = open_chromium()
        try:
            # Loss, learning rate and throughput: the charts a first look is for, in the first, open pane.
            driver.get(f"http://127.0.0.1:{server.port}/#scalars&tagFilter=train%2Floss%7Ctrain%2Flr%7Cperf%2F")
            deadline = time.monotonic() + 90
            text, vertices = "", 0
            while time.monotonic() < deadline:
                text = driver.execute_script(DEEP_TEXT_JS)
                vertices = driver.execute_script(LINE_VERTICES_JS, "path.line")
                if run_name in text and "train/loss" in text and vertices >= 60:
                    break
                time.sleep(1)
            _save_settled(driver, screenshot)  # once the charts' fade-in is over
        finally:
            driver.quit()

    assert run_name in text, f"run {run_name} not listed on the page: {text[:2000]}"
    assert "train/loss" in text and "train/lr" in text and "perf/tokens_per_s" in text
    assert vertices >= 60, f"no chart drew the 64 steps (most vertices in a line: {vertices})"
    _keep_picture(screenshot)


def test_a_shared_tensorboard_opens_with_its_token_and_its_pages_load_through_the_cookie(tmp_path: Path) -> None:
    """`mftb tensorboard --bind_all`: without the token the page says how to get in and shows no data; the
    printed URL's ?token= is traded for a cookie (the address bar loses it) and the scalars dashboard's
    own requests (runs, tags, points: TensorBoard's XHRs, same origin) carry the cookie and draw the run;
    so do a dynamic plugin's frame, ES module and JSON requests (the ranks dashboard)."""
    from tb_helpers import matrices, write_ranks_run

    from mindformers_tbplugin.tfevents.writer import RunWriter
    from mindformers_tbplugin.viewer.access_token import cookie_name

    run_name = "llama_tiny_20261129-120000"
    writer = RunWriter(tmp_path / "tb" / run_name)
    writer.add_session_start(1)
    for step in range(1, 65):
        writer.add_scalars(step, {"train/loss": 2.0 / step, "train/lr": 1e-3})
    writer.close()
    slow = matrices(16, 12)
    slow[:, 11, 0] *= 1.5
    write_ranks_run(tmp_path / "tb" / "job", slow)
    port = tensorboard_server.free_port(18366)
    with mftb_tensorboard(tmp_path / "tb", "--bind_all", "--port", str(port)) as server:
        (ready,) = [line for line in server.lines if line.startswith("TensorBoard is ready:")]
        token = ready.split()[3].split("?token=")[1]
        driver = open_chromium()
        try:
            driver.get(f"http://127.0.0.1:{port}/#scalars")
            refused = driver.execute_script("return document.body.innerText")
            driver.get(f"http://127.0.0.1:{port}/?token={token}#scalars&tagFilter=train%2Floss")
            address = driver.current_url
            deadline = time.monotonic() + 90
            text, vertices = "", 0
            while time.monotonic() < deadline:
                text = driver.execute_script(DEEP_TEXT_JS)
                vertices = driver.execute_script(LINE_VERTICES_JS, "path.line")
                if run_name in text and vertices >= 60:
                    break
                time.sleep(1)
            cookies = {cookie["name"]: cookie for cookie in driver.get_cookies()}
            drawn, ranks = _ranks_dashboard(driver, port, deadline=time.monotonic() + 90)
        finally:
            driver.quit()

    assert "This TensorBoard needs its access token" in refused and run_name not in refused, refused
    assert address == f"http://127.0.0.1:{port}/#scalars&tagFilter=train%2Floss", address  # no token left in it
    cookie = cookies[cookie_name(port)]
    assert (cookie["value"], cookie["httpOnly"], cookie["sameSite"]) == (token, True, "Lax")
    assert run_name in text and "train/loss" in text, text[:2000]
    assert vertices >= 60, f"no chart drew the 64 steps (most vertices in a line: {vertices})"
    assert drawn == str(16 * 12) and ranks[0] == "11", (drawn, ranks)


def test_per_rank_runs_and_the_ranks_dashboard_of_an_msrun_job(tmp_path: Path, tiny_data: Path) -> None:
    """A real 2-rank job, rank 1 slowed: per-rank runs beside the main run in the scalars dashboard;
    the ranks plugin enabled in a plain TensorBoard, its routes and its heatmap naming rank 1."""

    config = yaml.safe_load(DP2_CONFIG.read_text())
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(tiny_data)
    config["train_dataset"]["data_loader"]["num_samples"] = 64
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["callbacks"] = [
        {"type": "MFLossMonitor"},
        {"type": "SlowRank", "auto_register": "rank_hooks.SlowRank"},
        # a record per 4 steps exactly (aggregate_seconds 0): the dashboard's record count is checked below
        {"type": "TensorBoardMonitor", "experiment": "llama_dp2", "aggregate_every": 4, "aggregate_seconds": 0},
    ]
    path = tmp_path / "dp2.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    output = _output_root(tmp_path, "job")
    launch = ["bash", str(LAUNCHER), "--config", str(path), "--worker_num", "2", "--output_dir", str(output)]
    helpers = str(REPO / "tests" / "helpers")
    job = subprocess.run(
        [*launch, "--master_port", str(tensorboard_server.any_free_port())],
        env=subprocess_env(REGISTER_PATH=helpers, PYTHONPATH=helpers, MFTB_TEST_SLOW_RANK="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    (run_dir,) = run_dirs(output / "tensorboard")
    screenshot = tmp_path / "tensorboard-ranks.png"

    with mftb_tensorboard(output / "tensorboard", "--port", str(tensorboard_server.free_port(18316))) as server:
        driver = open_chromium()
        try:
            # Each rank's step time and memory, next to the main run's.
            driver.get(f"http://127.0.0.1:{server.port}/#scalars&tagFilter=perf%2Fstep_time_ms%7Csystem%2F")
            deadline = time.monotonic() + 90
            text, vertices = "", 0
            while time.monotonic() < deadline:
                text = driver.execute_script(DEEP_TEXT_JS)
                vertices = driver.execute_script(LINE_VERTICES_JS, "path.line")
                if f"{run_dir.name}/rank_1" in text and vertices >= 30:
                    break
                time.sleep(1)
            _save_settled(driver, screenshot)
            # The ranks plugin: enabled, the job listed, rank 1 higher, drawn and named in the page.
            assert plugin_enabled(server.port, "ranks") is True
            (listed,) = served_json(server.port, "/data/plugin/ranks/runs")
            assert (listed["run"], listed["world_size"], listed["records"]) == (run_dir.name, 2, 8)  # 32 steps
            matrix = served_json(server.port, f"/data/plugin/ranks/matrix?run={run_dir.name}&channel=step_time_ms")
            assert matrix["first_rank"] == [0, 1] and matrix["columns"] == 8
            assert matrix["node_names"] == [socket.gethostname()]  # gathered from the ranks at train begin
            stragglers = served_json(server.port, f"/data/plugin/ranks/stragglers?run={run_dir.name}")
            drawn, ranks = _ranks_dashboard(driver, server.port, deadline=time.monotonic() + 90)
            row_labels, step_ticks = _heatmap_axes(driver)
        finally:
            driver.quit()

    # the heatmap drawn whole, and the straggler list as the route gives it (its values against the job's
    # records: tests/jobs/test_mcore_models.py::test_the_ranks_dashboard_serves_the_jobs_records)
    assert drawn == str(2 * 8) and ranks == [str(entry["rank"]) for entry in stragglers["ranks"]], (drawn, ranks)
    assert ranks, stragglers
    assert row_labels == ["0", "1"] and step_ticks[0] == 4, (row_labels, step_ticks)  # records at 4, 8, ..., 32
    for run in (run_dir.name, f"{run_dir.name}/rank_0", f"{run_dir.name}/rank_1"):
        assert run in text, f"run {run} not listed on the page: {text[:2000]}"
    assert "perf/step_time_ms" in text and vertices >= 30
    _keep_picture(screenshot)


# The iframe TensorBoard loads a dynamic plugin's ES module in (the plugin named by the script's argument),
# wherever it sits among the shadow roots.
PLUGIN_IFRAME_JS = """
const find = (root) => {
  for (const frame of root.querySelectorAll('iframe')) {
    if ((frame.src || '').includes(`name=${arguments[0]}`)) return frame;
  }
  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; }
  return null;
};
return find(document);
"""


def _open_plugin(driver: object, port: int, name: str, deadline: float) -> None:
    """Open a plugin's dashboard and leave the driver inside its frame."""
    driver.get(f"http://127.0.0.1:{port}/#{name}")
    frame = None
    while frame is None and time.monotonic() < deadline:
        frame = driver.execute_script(PLUGIN_IFRAME_JS, name)
        time.sleep(0.5)
    assert frame is not None, driver.execute_script(DEEP_TEXT_JS)[:2000]
    driver.switch_to.frame(frame)


def _ranks_dashboard(driver: object, port: int, deadline: float) -> tuple[str, list[str]]:
    """Open the ranks dashboard and wait for its heatmap and straggler list; returns the cells drawn
    and the straggler list's ranks, with the driver left inside the plugin's frame."""
    _open_plugin(driver, port, "ranks", deadline)
    drawn, ranks = "", []
    while time.monotonic() < deadline:
        drawn = driver.execute_script("return document.querySelector('#heatmap')?.dataset.drawn || ''")
        ranks = driver.execute_script(
            "return [...document.querySelectorAll('#stragglers li')].map((li) => li.dataset.rank)"
        )
        if drawn and ranks:
            break
        time.sleep(0.5)
    return drawn, ranks


def _heatmap_axes(driver: object) -> tuple[list[str], list[int]]:
    """The rank labels and step ticks the heatmap drew (its canvas records them)."""
    read = "return document.querySelector('#heatmap').dataset[arguments[0]]"
    return json.loads(driver.execute_script(read, "rowLabels")), json.loads(driver.execute_script(read, "stepTicks"))


RANKS_LEFT, RANKS_BOTTOM = 130, 18  # the ranks heatmap's margins: node names and rank labels; the step axis


def test_ranks_dashboard_draws_the_heatmap_and_names_the_straggler(tmp_path: Path) -> None:
    from tb_helpers import matrices, write_ranks_run

    log_root = _output_root(tmp_path, "ranks") / "tensorboard"
    run_dir = log_root / "llama_70b_20261201-093000"
    values = matrices(64, 60)
    values[:, 40:48, 0] *= 1.04  # one node a little slower throughout
    values[25:, 19, 0] *= 1.35  # rank 19 becomes the straggler at step 260
    values[40:50, 48:56, 0] *= 1.2  # node host6, all 8 ranks, from step 410 to 500
    values[:, :, 2] = 28 + np.arange(64)[None, :] % 8 / 4
    write_ranks_run(run_dir, values)
    screenshot = tmp_path / "tensorboard-ranks-heatmap.png"

    with mftb_tensorboard(log_root, "--port", str(tensorboard_server.free_port(18326))) as server:
        driver = open_chromium()
        try:
            deadline = time.monotonic() + 90
            drawn, ranks = _ranks_dashboard(driver, server.port, deadline)
            assert drawn == str(64 * 60), f"heatmap cells drawn: {drawn!r}"
            first = driver.find_element("css selector", "#stragglers li")
            straggler_text = first.text
            slow_nodes = [li.text for li in driver.find_elements("css selector", "#slow-nodes li")]
            on_host6 = driver.find_element("css selector", '#stragglers li[data-rank="50"]').text
            first.click()
            log_line = ""
            while "worker" not in log_line and time.monotonic() < deadline:
                log_line = driver.find_element("css selector", "#worker-log").text
                time.sleep(0.3)
            # Hover the straggler's row late in the run: the tooltip names rank, node, step and value.
            canvas = driver.find_element("css selector", "#heatmap")
            width, height = canvas.size["width"], canvas.size["height"] - RANKS_BOTTOM
            tip = _hover(driver, canvas, RANKS_LEFT + (width - RANKS_LEFT) * 50.5 / 60, height * 19.5 / 64)
            row_labels, step_ticks = _heatmap_axes(driver)
            _save_page(driver, screenshot)
        finally:
            driver.quit()

    assert ranks[0] == "19", f"straggler list: {ranks}"
    assert "rank 19 (host2)" in straggler_text and "since step 260" in straggler_text
    (slow_node,) = slow_nodes
    assert re.fullmatch(
        r"node host6: 8 of 8 ranks slow in 10 record\(s\), since step 410, its median 1\.(19|2\d)\dx the job "
        r"median then",
        slow_node,
    ), slow_node
    # a rank slow because its host is: never the slowest, so no "slowest in 0 record(s), 0.000x the median"
    assert re.fullmatch(
        r"rank 50 \(host6\): slow in 10 record\(s\) \(above 1\.1x the median\) since step 410, 1\.(19|2\d)\dx the "
        r"median on average then; on slow node host6 \(all its ranks slow in 10 record\(s\), its median 1\.(19|2\d)\dx "
        r"the job median then\)",
        on_host6,
    ), on_host6
    assert log_line == "worker log: /jobs/out/msrun_log/2/worker_19.log"
    assert re.fullmatch(r"rank 19, node host2, step (\d+): 1\.3\d* x median", tip), tip
    # 64 rows of 4 px: every third rank labelled (12 px apart); step ticks from the first record on.
    assert row_labels == [str(rank) for rank in range(0, 64, 3)], row_labels
    assert step_ticks[0] == 10 and len(step_ticks) >= 3 and step_ticks == sorted(step_ticks), step_ticks
    _keep_picture(screenshot)


def test_ranks_dashboard_on_the_benchmarks_synthetic_log(tmp_path: Path) -> None:
    """The benchmark's generator (benchmarks/synthetic_ranks.py) at 1,024 ranks x 2,000 records, so a
    test can load it: the page downsamples it, draws it, and lists the planted straggler first. The
    8,192 x 10,000 figures are BENCHMARKS.md's."""
    from benchmarks.synthetic_ranks import generate

    log_root = tmp_path / "tensorboard"
    synthetic = generate(log_root, ranks=1024, records=2000)
    with mftb_tensorboard(log_root, "--port", str(tensorboard_server.free_port(18336))) as server:
        driver = open_chromium()
        try:
            drawn, ranks = _ranks_dashboard(driver, server.port, deadline=time.monotonic() + 120)
        finally:
            driver.quit()
    assert drawn and int(drawn) < 1024 * 2000, f"heatmap cells drawn: {drawn!r} (downsampled: fewer than all)"
    assert ranks and ranks[0] == str(synthetic.straggler_rank), (ranks[:5], synthetic.straggler_rank)


def _moe_dashboard(driver: object, port: int, deadline: float) -> tuple[str, str, list[str]]:
    """Open the moe dashboard and wait for its heatmap, strip and lists; returns the heatmap's and the
    strip's drawn sizes (rows x columns) and the over-the-run list, inside the plugin's frame."""
    _open_plugin(driver, port, "moe", deadline)
    heatmap, strip, over_run = "", "", []
    while time.monotonic() < deadline:
        heatmap = driver.execute_script("return document.querySelector('#heatmap')?.dataset.drawn || ''")
        strip = driver.execute_script("return document.querySelector('#strip')?.dataset.drawn || ''")
        over_run = driver.execute_script(
            "return [...document.querySelectorAll('#worst-run li')].map((li) => li.textContent)"
        )
        if heatmap and strip and over_run:
            break
        time.sleep(0.5)
    return heatmap, strip, over_run


def _hover(driver: object, element: object, x: float, y: float) -> str:
    """Move the mouse to ``x``, ``y`` from the element's top left corner; the dashboard's tooltip then."""
    from selenium.webdriver.common.action_chains import ActionChains

    offset = round(x - element.size["width"] / 2), round(y - element.size["height"] / 2)  # from its centre
    ActionChains(driver).move_to_element_with_offset(element, *offset).perform()
    return driver.find_element("css selector", "#tip").text


def _save_page(driver: object, picture: Path) -> None:
    """A picture of the whole TensorBoard page, from inside a plugin's frame."""
    driver.switch_to.default_content()
    _save_settled(driver, picture)


def _save_settled(driver: object, picture: Path, timeout: float = 30.0) -> None:
    """The page's picture once it has stopped changing (two screenshots in a row the same: transitions
    over), or the last one after ``timeout``."""
    deadline = time.monotonic() + timeout
    shot = driver.get_screenshot_as_png()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        previous, shot = shot, driver.get_screenshot_as_png()
        if shot == previous:
            break
    picture.write_bytes(shot)


MOE_LEFT = 104  # moe_frontend/index.js: the layer names' room left of both canvases
MOE_RIGHT = 120  # ... and the MaxVio bars' right of the heatmap


def test_moe_dashboard_names_the_planted_layer_hovers_and_follows_a_strip_click(tmp_path: Path) -> None:
    """The benchmark's generator at 8 layers x 16 experts x 30 records: the heatmap and the strip drawn,
    the planted layer and its dead experts named first, a dead expert's tooltip, a strip click's step."""
    from selenium.webdriver.common.action_chains import ActionChains

    from benchmarks.synthetic_moe import generate

    log_root = tmp_path / "tensorboard"
    made = generate(log_root, layers=8, experts=16, records=30)
    dead = sorted(made.dead_experts)
    with mftb_tensorboard(log_root, "--port", str(tensorboard_server.free_port(18346))) as server:
        driver = open_chromium()
        try:
            deadline = time.monotonic() + 90
            heatmap, strip, over_run = _moe_dashboard(driver, server.port, deadline)
            at_step = driver.find_element("css selector", "#worst-step li").text
            # Hover the planted layer's first dead expert: 16 px rows, 16 experts across the free width.
            canvas = driver.find_element("css selector", "#heatmap")
            cell = (canvas.size["width"] - MOE_LEFT - MOE_RIGHT) / 16
            heatmap_tip = _hover(driver, canvas, MOE_LEFT + (dead[0] + 0.5) * cell, (made.planted_row + 0.5) * 16)
            # Hover, then click, the planted layer's cell of record 20 in the strip (12 px rows, one record a column).
            band = driver.find_element("css selector", "#strip")
            column = (band.size["width"] - MOE_LEFT) / 30
            strip_tip = _hover(driver, band, MOE_LEFT + 20.5 * column, (made.planted_row + 0.5) * 12)
            ActionChains(driver).click().perform()
            shown = ""
            while shown != str(made.step_of(20)) and time.monotonic() < deadline:
                shown = canvas.get_attribute("data-step")
                time.sleep(0.2)
            label = driver.find_element("css selector", "#step").text
            slider = driver.find_element("css selector", "#slider").get_attribute("value")
        finally:
            driver.quit()

    assert (heatmap, strip) == ("8x16", "8x30")
    since = f"dead since step {made.step_of(made.dead_from_record)}"
    assert at_step.startswith(f"{made.planted_layer}: experts {dead[0]}, {dead[1]} {since}; MaxVio "), at_step
    assert f"(expert {made.hot_expert} at " in at_step
    assert over_run[0].startswith(f"{made.planted_layer}: experts {dead[0]}, {dead[1]} {since}; 20 records"), over_run
    pattern = rf"{made.planted_layer}, expert {dead[0]}: load 0\.0\d\d x mean, [0-9.]+% of the layer's slots, "
    assert re.fullmatch(pattern + r"bias [0-9.]+ \(dead: under 0\.1 x mean\)", heatmap_tip), heatmap_tip
    assert re.fullmatch(rf"{made.planted_layer}, step 210: MaxVio [0-9.]+, 2 dead experts", strip_tip), strip_tip
    assert shown == "210" and slider == "20" and label.startswith("step 210 (record 21 of 30"), (shown, slider, label)


def test_moe_dashboard_at_deepseek_v3_size(tmp_path: Path) -> None:
    """DeepSeek-V3's 58 MoE layers + 1 MTP layer x 256 routed experts, 2,000 records (120,000 steps at the
    defaults): the whole record drawn, the strip downsampled, the planted layer first. Its picture is
    docs/tensorboard-moe.png."""

    from benchmarks.synthetic_moe import generate

    log_root = _output_root(tmp_path, "moe") / "tensorboard"
    made = generate(log_root, run="deepseek_v3_20261201-093000")
    screenshot = tmp_path / "tensorboard-moe.png"
    with mftb_tensorboard(log_root, "--port", str(tensorboard_server.free_port(18356))) as server:
        driver = open_chromium()
        try:
            driver.set_window_size(1400, 1560)  # the heatmap, the strip and the lists in one picture
            heatmap, strip, over_run = _moe_dashboard(driver, server.port, deadline=time.monotonic() + 120)
            canvas = driver.find_element("css selector", "#heatmap")
            cell = (canvas.size["width"] - MOE_LEFT - MOE_RIGHT) / 256
            tip = _hover(driver, canvas, MOE_LEFT + (made.hot_expert + 0.5) * cell, (made.planted_row + 0.5) * 9)
            _save_page(driver, screenshot)
        finally:
            driver.quit()

    rows, columns = map(int, strip.split("x"))
    assert heatmap == "59x256" and rows == 59 and columns < 2000, (heatmap, strip)
    dead = ", ".join(map(str, sorted(made.dead_experts)))
    since = f"{made.step_of(made.dead_from_record):,}"
    assert over_run[0].startswith(f"{made.planted_layer}: experts {dead} dead since step {since}"), over_run[:2]
    hot = re.match(rf"{made.planted_layer}, expert {made.hot_expert}: load ([0-9.]+) x mean", tip)
    assert hot and float(hot.group(1)) > 5, tip  # the expert taking a growing share, near 8x at the end
    _keep_picture(screenshot)
