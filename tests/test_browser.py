"""A real tiny training seen in a real browser: `mftb tensorboard` + headless Chromium on the scalars dashboard.

Needs Debian's chromium and chromium-driver (`make browser` installs them where it can); skips otherwise.
With MFTB_SCREENSHOT=path the screenshot is also copied there (`make screenshot` uses it for the README).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from conftest import run_dirs, train, write_tiny_config
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


# For the README picture: a log folder a reader's would look like, not the test's temporary one.
SCREENSHOT_LOGS = Path(tempfile.gettempdir()) / "mftb-demo" / "output" / "tensorboard"


def test_scalars_dashboard_shows_the_run_and_its_loss_curve(tmp_path: Path, tiny_data: Path) -> None:
    log_root = tmp_path / "tb"
    if os.environ.get("MFTB_SCREENSHOT"):
        shutil.rmtree(SCREENSHOT_LOGS, ignore_errors=True)
        log_root = SCREENSHOT_LOGS
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
    assert screenshot.stat().st_size > 20_000  # a real picture, not a blank page
    if os.environ.get("MFTB_SCREENSHOT"):
        shutil.copyfile(screenshot, os.environ["MFTB_SCREENSHOT"])
