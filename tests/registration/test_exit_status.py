"""The alert-stop exit status at interpreter exit, in real Python processes (no training: the state a
training's end leaves is set directly; trainings that stop are in tests/callbacks/test_alert_monitor.py
and tests/jobs/test_msrun_jobs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

from mindformers_tbplugin.registration.exit_status import STOPPED_BY_ALERT

pytestmark = pytest.mark.process
STOPPED = "stopped by AlertMonitor (nonfinite on train/loss) at step 2"
PRELUDE = """
import mindformers_tbplugin  # as the .pth autoload does at interpreter start
from mindformers_tbplugin.registration import exit_status
"""


def run_script(folder: Path, body: str) -> subprocess.CompletedProcess[str]:
    """An entry script standing in for a release's run_mindformer.py, run as users run it."""
    script = folder / "run_mindformer.py"
    script.write_text(PRELUDE + body)
    return subprocess.run(
        [sys.executable, str(script)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ending", ["", "import sys; sys.exit(0)"], ids=["returns", "sys.exit(0)"])
def test_an_entry_that_ends_normally_after_an_alert_stop_exits_3_and_says_why(tmp_path: Path, ending: str) -> None:
    result = run_script(tmp_path, f"exit_status.training_stopped_by_alert({STOPPED!r})\nprint('main ended')\n{ending}")
    assert result.returncode == STOPPED_BY_ALERT, result.stderr
    assert result.stdout == "main ended\n"  # flushed before the process ends itself
    assert result.stderr.splitlines() == [f"run_mindformer.py: {STOPPED}; exit status 3"]


def test_without_an_alert_stop_the_status_is_the_entrys_own(tmp_path: Path) -> None:
    assert run_script(tmp_path, "").returncode == 0
    assert run_script(tmp_path, "import sys; sys.exit(5)").returncode == 5


def test_a_failure_after_the_stop_keeps_status_1_and_prints_no_stop_line(tmp_path: Path) -> None:
    result = run_script(
        tmp_path, f"exit_status.training_stopped_by_alert({STOPPED!r})\nraise RuntimeError('late failure')"
    )
    assert result.returncode == 1
    assert "RuntimeError: late failure" in result.stderr and "exit status 3" not in result.stderr


def test_an_entry_that_returns_the_status_itself_keeps_it_and_reports_once(tmp_path: Path) -> None:
    body = (
        f"exit_status.training_stopped_by_alert({STOPPED!r})\n"
        "status = exit_status.report_alert_stop('mftb train')\n"
        "import sys; sys.exit(status + 10)"
    )
    result = run_script(tmp_path, body)
    assert result.returncode == STOPPED_BY_ALERT + 10
    assert result.stderr.splitlines() == [f"mftb train: {STOPPED}; exit status 3"]
