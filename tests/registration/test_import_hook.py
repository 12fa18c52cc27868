"""The three ways `type: TensorBoardMonitor` resolves, each in a real training subprocess whose
script imports only mindformers (or, for the explicit route, our package and then mindformers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HELPERS, MFTB, read_scalars, run_dirs, subprocess_env, write_tiny_config

pytestmark = pytest.mark.process

SCRIPT = HELPERS / "train_with_mindformers_only.py"


def _run(config: Path, cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(config), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _config(tmp_path: Path, data: Path, auto_register: bool = False) -> Path:
    monitor = {"type": "TensorBoardMonitor", "log_dir": str(tmp_path / "tb"), "experiment": "route"}
    wrapper = {"type": "CPUTrainOneStepCell", "scale_sense": 1.0, "use_clip_grad": True}
    if auto_register:
        monitor["auto_register"] = "mftb_register.TensorBoardMonitor"
        wrapper["auto_register"] = "mftb_register.CPUTrainOneStepCell"
    return write_tiny_config(tmp_path, data, [monitor], num_samples=16, runner_wrapper=wrapper)


def _assert_logged_eight_steps(tmp_path: Path, result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    (run_dir,) = run_dirs(tmp_path / "tb")
    assert [step for step, _ in read_scalars(run_dir)["train/loss"]] == list(range(1, 9))


@pytest.mark.compat
def test_installed_plugin_registers_itself_when_mindformers_is_imported(tmp_path: Path, tiny_data: Path) -> None:
    result = _run(_config(tmp_path, tiny_data), tmp_path, subprocess_env())
    _assert_logged_eight_steps(tmp_path, result)


@pytest.mark.compat
def test_mindformers_register_path_route(tmp_path: Path, tiny_data: Path) -> None:
    register_path = subprocess.run([MFTB, "register-path"], capture_output=True, text=True, check=True).stdout.strip()
    env = subprocess_env(MFTB_NO_AUTOREGISTER="1", REGISTER_PATH=register_path)
    result = _run(_config(tmp_path, tiny_data, auto_register=True), tmp_path, env)
    _assert_logged_eight_steps(tmp_path, result)


def test_explicit_import_route(tmp_path: Path, tiny_data: Path) -> None:
    env = subprocess_env(MFTB_NO_AUTOREGISTER="1")
    result = _run(_config(tmp_path, tiny_data), tmp_path, env, "--import-plugin")
    _assert_logged_eight_steps(tmp_path, result)


def test_switched_off_auto_registration_leaves_the_type_unknown(tmp_path: Path, tiny_data: Path) -> None:
    env = subprocess_env(MFTB_NO_AUTOREGISTER="1")
    result = _run(_config(tmp_path, tiny_data), tmp_path, env)
    assert result.returncode != 0
    assert "CPUTrainOneStepCell" in result.stderr + result.stdout
    assert not run_dirs(tmp_path / "tb")


@pytest.mark.parametrize("switch", ["", "1"])
def test_processes_that_never_import_mindformers_load_nothing_heavy(switch: str) -> None:
    code = (
        "import sys; print(int('mindformers_tbplugin' in sys.modules), "
        "int(any(m.split('.')[0] in ('mindspore', 'mindformers', 'tensorboard') for m in sys.modules)))"
    )
    env = subprocess_env(MFTB_NO_AUTOREGISTER=switch) if switch else subprocess_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    plugin_loaded, heavy_loaded = out.split()
    assert plugin_loaded == ("0" if switch else "1")
    assert heavy_loaded == "0"
