"""A real tiny training seen in a real browser: `mftb tensorboard` + headless Chromium on the scalars dashboard.

Needs Debian's chromium and chromium-driver (`make browser` installs them where it can); skips otherwise.
With MFTB_SCREENSHOTS=folder the pictures are also copied there (`make screenshot` uses them for the README).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, run_dirs, subprocess_env, train, write_tiny_config
from tb_helpers import CHROMEDRIVER, CHROMIUM, DEEP_COUNT_JS, DEEP_TEXT_JS, mftb_tensorboard, open_chromium

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
    pytest.mark.slow,
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
            time.sleep(1)  # let the charts' fade-in finish before the picture
            driver.save_screenshot(str(screenshot))
        finally:
            driver.quit()

    assert run_name in text, f"run {run_name} not listed on the page: {text[:2000]}"
    assert "train/loss" in text and "train/lr" in text and "perf/tokens_per_s" in text
    assert vertices >= 60, f"no chart drew the 64 steps (most vertices in a line: {vertices})"
    _keep_picture(screenshot)


def test_per_rank_runs_and_the_ranks_dashboard_of_an_msrun_job(tmp_path: Path, tiny_data: Path) -> None:
    """A real 2-rank job, rank 1 slowed: per-rank runs beside the main run in the scalars dashboard;
    the ranks plugin enabled in a plain TensorBoard, its routes and its heatmap naming rank 1."""
    from test_ranks_plugin import _get, _ranks_enabled

    config = yaml.safe_load(DP2_CONFIG.read_text())
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(tiny_data)
    config["train_dataset"]["data_loader"]["num_samples"] = 64
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["callbacks"] = [
        {"type": "MFLossMonitor"},
        {"type": "SlowRank", "auto_register": "rank_hooks.SlowRank"},
        {"type": "TensorBoardMonitor", "experiment": "llama_dp2", "aggregate_every": 4},
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
            time.sleep(1)
            driver.save_screenshot(str(screenshot))
            # The ranks plugin: enabled, the job listed, rank 1 higher, drawn and named in the page.
            assert _ranks_enabled(server.port) is True
            (listed,) = _get(server.port, "/data/plugin/ranks/runs")
            assert (listed["run"], listed["world_size"], listed["records"]) == (run_dir.name, 2, 8)  # 32 steps
            matrix = _get(server.port, f"/data/plugin/ranks/matrix?run={run_dir.name}&channel=step_time_ms")
            rows = dict(zip(matrix["first_rank"], matrix["values"], strict=True))
            assert sum(rows[1]) > sum(rows[0]), matrix
            drawn, ranks = _ranks_dashboard(driver, server.port, deadline=time.monotonic() + 90)
        finally:
            driver.quit()

    assert drawn == str(2 * 8) and ranks[0] == "1", (drawn, ranks)
    for run in (run_dir.name, f"{run_dir.name}/rank_0", f"{run_dir.name}/rank_1"):
        assert run in text, f"run {run} not listed on the page: {text[:2000]}"
    assert "perf/step_time_ms" in text and vertices >= 30
    _keep_picture(screenshot)


# The iframe TensorBoard loads a dynamic plugin's ES module in, wherever it sits among the shadow roots.
PLUGIN_IFRAME_JS = """
const find = (root) => {
  for (const frame of root.querySelectorAll('iframe')) if ((frame.src || '').includes('name=ranks')) return frame;
  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; }
  return null;
};
return find(document);
"""


def _ranks_dashboard(driver: object, port: int, deadline: float) -> tuple[str, list[str]]:
    """Open the ranks dashboard and wait for its heatmap and straggler list; returns the cells drawn
    and the straggler list's ranks, with the driver left inside the plugin's frame."""
    driver.get(f"http://127.0.0.1:{port}/#ranks")
    frame = None
    while frame is None and time.monotonic() < deadline:
        frame = driver.execute_script(PLUGIN_IFRAME_JS)
        time.sleep(0.5)
    assert frame is not None, driver.execute_script(DEEP_TEXT_JS)[:2000]
    driver.switch_to.frame(frame)
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


def test_ranks_dashboard_draws_the_heatmap_and_names_the_straggler(tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from test_ranks_plugin import matrices, write_ranks_run

    log_root = _output_root(tmp_path, "ranks") / "tensorboard"
    run_dir = log_root / "llama_70b_20261201-093000"
    values = matrices(64, 60)
    values[:, 40:48, 0] *= 1.04  # one node a little slower throughout
    values[25:, 19, 0] *= 1.35  # rank 19 becomes the straggler at step 260
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
            first.click()
            log_line = ""
            while "worker" not in log_line and time.monotonic() < deadline:
                log_line = driver.find_element("css selector", "#worker-log").text
                time.sleep(0.3)
            # Hover the straggler's row late in the run: the tooltip names rank, node, step and value.
            canvas = driver.find_element("css selector", "#heatmap")
            width, height = canvas.size["width"], canvas.size["height"]
            x = 90 + (width - 90) * 50 // 60 - width // 2
            y = int(height * 19.5 / 64) - height // 2
            ActionChains(driver).move_to_element_with_offset(canvas, x, y).perform()
            tip = driver.find_element("css selector", "#tip").text
            driver.switch_to.default_content()
            time.sleep(0.5)
            driver.save_screenshot(str(screenshot))
        finally:
            driver.quit()

    assert ranks[0] == "19", f"straggler list: {ranks}"
    assert "rank 19 (host2)" in straggler_text and "since step 260" in straggler_text
    assert log_line == "worker log: /jobs/out/msrun_log/2/worker_19.log"
    assert re.fullmatch(r"rank 19, node host2, step (\d+): 1\.3\d* x median", tip), tip
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
