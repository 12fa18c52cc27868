"""TensorBoardMonitor rejects bad arguments at construction, before any graph compiles."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import MFTB, subprocess_env, write_tiny_config

from mindformers_tbplugin.callbacks import TensorBoardMonitor
from mindformers_tbplugin.schema import ConfigError


def test_log_dir_is_made_absolute_at_construction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monitor = TensorBoardMonitor(log_dir="rel/tb")
    monkeypatch.chdir("/")
    assert monitor.log_root == tmp_path / "rel" / "tb"


def test_every_bad_argument_is_reported_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        TensorBoardMonitor(
            log_dir=str(tmp_path),
            log_every=-5,
            flush_secs="often",
            vs_tokens="yes",
            param_norm_every=2.5,
            extra_metrics="pkg:fn",
        )
    message = str(caught.value)
    assert "TensorBoardMonitor.log_every: expected integer >= 1, got -5" in message
    assert "TensorBoardMonitor.flush_secs: expected number, got 'often'" in message
    assert "TensorBoardMonitor.vs_tokens: expected boolean, got 'yes'" in message
    assert "TensorBoardMonitor.param_norm_every: expected integer, got 2.5" in message
    assert "TensorBoardMonitor.extra_metrics: expected list of string or null" in message
    assert len(caught.value.problems) == 5


@pytest.mark.parametrize("name", ["log_dir", "experiment", "run_name_pattern"])
def test_an_empty_path_or_name_is_an_error_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    kwargs = {"log_dir": str(tmp_path / "tb"), name: ""}
    with pytest.raises(ConfigError) as caught:
        TensorBoardMonitor(**kwargs)
    assert re.search(rf"TensorBoardMonitor\.{name}: expected non-empty string( or null)?, got ''", str(caught.value))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"flush_secs": 0}, "flush_secs: expected number between 0.1 and 3600, got 0"),
        ({"run_name_pattern": "{experiment}_{host}"}, "unknown placeholder(s) host"),
        ({"experiment": "../escape"}, "experiment: expected a non-empty relative folder name"),
        ({"resume_run": "/abs/run"}, "resume_run: expected a non-empty relative folder name"),
        ({"extra_metrics": ["no_colon"]}, "extra_metrics[0]: 'no_colon' is not of the form"),
        ({"extra_metrics": ["no_such_module_xyz:fn"]}, "extra_metrics[0]: cannot import module 'no_such_module_xyz'"),
        ({"extra_metrics": ["os.path:no_such_fn"]}, "extra_metrics[0]: module 'os.path' has no attribute"),
    ],
)
def test_specific_problems_name_the_parameter(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        TensorBoardMonitor(log_dir=str(tmp_path), **kwargs)
    assert fragment in str(caught.value)


def test_unwritable_log_dir_names_the_path_and_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError) as caught:
        TensorBoardMonitor(log_dir=str(blocker / "tb"))
    assert f"log_dir: cannot write to {blocker / 'tb'}: Not a directory" in str(caught.value)


def test_read_only_filesystem_is_refused() -> None:
    with pytest.raises(ConfigError, match="log_dir: cannot write to /proc/tb"):
        TensorBoardMonitor(log_dir="/proc/tb")


def test_non_ascii_log_dir_warns_with_the_path(tmp_path: Path) -> None:
    target = tmp_path / "日志" / "tb"
    with pytest.warns(UserWarning, match=f"log_dir {target} contains non-ASCII"):
        TensorBoardMonitor(log_dir=str(target))


def test_mftb_train_reports_a_bad_monitor_config_before_compiling(tmp_path: Path, tiny_data: Path) -> None:
    config = write_tiny_config(
        tmp_path, tiny_data, [{"type": "TensorBoardMonitor", "log_dir": str(tmp_path / "tb"), "log_every": 0}]
    )
    result = subprocess.run(
        [MFTB, "train", "--config", str(config)], cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == 2
    # Checked from the YAML file (with its line) before MindFormers builds anything.
    assert re.search(r"callbacks\[0\]\.log_every \(line \d+\): expected integer >= 1, got 0", result.stderr)
    assert "Traceback" not in result.stderr
    assert "Model Compiling" not in result.stdout + result.stderr


def test_mftb_train_missing_config_is_a_clean_error(tmp_path: Path) -> None:
    result = subprocess.run([MFTB, "train", "--config", str(tmp_path / "nope.yaml")], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"config file not found: {tmp_path / 'nope.yaml'}" in result.stderr
    assert "Traceback" not in result.stderr
