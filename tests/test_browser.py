"""A real tiny training seen in a real browser: `mftb tensorboard` + headless Chromium on the scalars dashboard.

Needs Debian's chromium and chromium-driver (`make browser` installs them where it can); skips otherwise.
With MFTB_SCREENSHOTS=folder the pictures are also copied there (`make screenshot` uses them for the README).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

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


def test_per_rank_runs_sit_beside_the_main_run_of_an_msrun_job(tmp_path: Path, tiny_data: Path) -> None:
    config = yaml.safe_load(DP2_CONFIG.read_text())
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(tiny_data)
    config["train_dataset"]["data_loader"]["num_samples"] = 64
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["callbacks"] = [{"type": "MFLossMonitor"}, {"type": "TensorBoardMonitor", "experiment": "llama_dp2"}]
    path = tmp_path / "dp2.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    output = _output_root(tmp_path, "job")
    launch = ["bash", str(LAUNCHER), "--config", str(path), "--worker_num", "2", "--output_dir", str(output)]
    job = subprocess.run(
        [*launch, "--master_port", str(tensorboard_server.any_free_port())],
        env=subprocess_env(),
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
        finally:
            driver.quit()

    for run in (run_dir.name, f"{run_dir.name}/rank_0", f"{run_dir.name}/rank_1"):
        assert run in text, f"run {run} not listed on the page: {text[:2000]}"
    assert "perf/step_time_ms" in text and vertices >= 30
    _keep_picture(screenshot)
