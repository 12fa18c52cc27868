"""The bundled tiny Qwen2.5-style config trains on the CPU through `mftb train` as shipped (only its
paths and length changed), and its model really is Qwen2.5-shaped."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import REPO, read_scalars, train

QWEN_TINY = REPO / "configs" / "tiny" / "qwen2_5_tiny_cpu.yaml"


def test_qwen2_5_tiny_config_is_qwen_shaped() -> None:
    model = yaml.safe_load(QWEN_TINY.read_text())["model"]["model_config"]
    assert model["n_kv_heads"] < model["num_heads"]
    assert model["qkv_has_bias"] is True
    assert model["theta"] == 1_000_000


def test_qwen2_5_tiny_config_trains_on_cpu(tmp_path: Path, tiny_data: Path) -> None:
    config = yaml.safe_load(QWEN_TINY.read_text())
    config["output_dir"] = str(tmp_path / "output")
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(tiny_data)
    config["train_dataset"]["data_loader"]["num_samples"] = 16  # 8 steps of batch 2
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    (monitor,) = [entry for entry in config["callbacks"] if entry["type"] == "TensorBoardMonitor"]
    monitor["log_dir"] = str(tmp_path / "tb")
    path = tmp_path / "qwen2_5_tiny_cpu.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))

    run = train(path, tmp_path)

    assert run.returncode == 0, run.output[-5000:]
    scalars = read_scalars(run.run_dir)
    assert [step for step, _ in scalars["train/loss"]] == list(range(1, 9))
    assert run.run_dir.name.startswith("qwen2_5_tiny_")
