"""Users who never pip-install MindFormers: MindSpore and MindFormers' requirements installed, the
plugin pip-installed, and a MindFormers release checkout whose own ``run_mindformer.py`` runs from
its root (plainly and as msrun's script). ``make compat`` builds such environments (a release's
sources with that release's script) and names the checkout in MFTB_MINDFORMERS_CHECKOUT."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import MFTB, REPO, mf_losses, read_scalars, run_dirs, subprocess_env, write_tiny_config

from mindformers_tbplugin.viewer.tensorboard_server import any_free_port

CHECKOUT = os.environ.get("MFTB_MINDFORMERS_CHECKOUT", "")
pytestmark = [
    pytest.mark.process,
    pytest.mark.compat,
    pytest.mark.skipif(not CHECKOUT, reason="runs in make compat's release-checkout environments"),
]
MONITOR = {"type": "TensorBoardMonitor", "experiment": "checkout"}


def checkout_env() -> dict[str, str]:
    """As a user runs: nothing on PYTHONPATH; mindformers comes from the script's folder."""
    env = subprocess_env()
    env.pop("PYTHONPATH", None)
    return env


def run(command: list[str], cwd: Path | str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=checkout_env(), capture_output=True, text=True, timeout=timeout)


def test_run_mindformer_from_the_checkout_root_logs_what_mflossmonitor_printed(tmp_path: Path, tiny_data: Path) -> None:
    callbacks = [{"type": "MFLossMonitor"}, dict(MONITOR, log_dir=str(tmp_path / "tb"))]
    config = write_tiny_config(tmp_path, tiny_data, callbacks, num_samples=16, local_norm=True)
    result = run([sys.executable, "run_mindformer.py", "--config", str(config)], cwd=CHECKOUT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    printed = mf_losses(output)
    (run_dir,) = run_dirs(tmp_path / "tb")
    scalars = read_scalars(run_dir)
    losses = scalars["train/loss"]
    assert [step for step, _ in losses] == list(range(1, 9)) == sorted(printed)
    for group in ("embedding", "layers.0", "layers.1", "final_norm", "head", "total"):  # local_norm: True
        assert [step for step, _ in scalars[f"grad_norm/{group}"]] == list(range(1, 9)), group
    for step, loss in losses:
        assert abs(loss - printed[step][0]) <= 1e-6, (step, loss, printed[step])


def test_run_mindformer_from_the_checkout_as_the_msrun_script(tmp_path: Path, tiny_data: Path) -> None:
    config = yaml.safe_load((REPO / "configs" / "tiny" / "llama_tiny_cpu_dp2.yaml").read_text())
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(tiny_data)
    config["train_dataset"]["data_loader"]["num_samples"] = 16
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["callbacks"] = [{"type": "MFLossMonitor"}, dict(MONITOR, aggregate_every=4)]
    path = tmp_path / "dp2.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    output = tmp_path / "out"
    launch = [str(REPO / "scripts" / "msrun_launch.sh"), "--config", str(path), "--worker_num", "2"]
    launch += ["--master_port", str(any_free_port()), "--output_dir", str(output)]
    result = run(["bash", *launch, "--entry", str(Path(CHECKOUT) / "run_mindformer.py")], cwd=CHECKOUT)
    logs = [(output / "msrun_log" / "0" / f"worker_{rank}.log").read_text(errors="replace") for rank in (0, 1)]
    assert result.returncode == 0, result.stderr[-3000:] + logs[0][-3000:]
    printed = [mf_losses(log) for log in logs]
    (run_dir,) = run_dirs(output / "tensorboard")
    losses = dict(read_scalars(run_dir)["train/loss"])
    assert sorted(losses) == list(range(1, 9))
    for step, value in losses.items():
        assert abs(value - (printed[0][step][0] + printed[1][step][0]) / 2) <= 1e-5, step


def test_mftb_train_run_from_the_checkout_root_uses_it(tmp_path: Path, tiny_data: Path) -> None:
    callbacks = [dict(MONITOR, log_dir=str(tmp_path / "tb"))]
    config = write_tiny_config(tmp_path, tiny_data, callbacks, num_samples=8)
    result = run([MFTB, "train", "--config", str(config)], cwd=CHECKOUT)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    assert f"mftb: using MindFormers {os.environ['MFTB_EXPECT_FRAMEWORK'].split('mindformers==')[1]}" in result.stderr
    (run_dir,) = run_dirs(tmp_path / "tb")
    assert [step for step, _ in read_scalars(run_dir)["train/loss"]] == [1, 2, 3, 4]


def test_mftb_train_elsewhere_says_where_mindformers_can_come_from(tmp_path: Path, tiny_data: Path) -> None:
    config = write_tiny_config(tmp_path, tiny_data, [dict(MONITOR, log_dir=str(tmp_path / "tb"))], num_samples=8)
    result = run([MFTB, "train", "--config", str(config)], cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    assert result.stderr.startswith("mftb train: error: mindformers is not importable in this Python environment")
    assert "release checkout" in result.stderr and "Traceback" not in result.stderr
