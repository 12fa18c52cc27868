"""``mftb import`` as users run it: a run folder written and summarised, unusable input refused with
exit status 2 and a message, never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import MFTB, read_scalars, subprocess_env
from tensorboardX import SummaryWriter

from mindformers_tbplugin.commands.import_runs import default_name


def mftb_import(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MFTB, "import", *args], capture_output=True, text=True, env=subprocess_env(), timeout=120)


def test_import_writes_a_run_folder_and_prints_points_per_tag(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path / "mf_tb"))  # MindFormers' built-in writer's tags
    for step in range(1, 6):
        writer.add_scalar("loss", 3.0 - step / 10, global_step=step)
        writer.add_scalar("learning-rate", 1e-5, global_step=step)
        writer.add_scalar("B-samples-per-day", 0.5, global_step=step)
    writer.close()
    result = mftb_import(str(tmp_path / "mf_tb"), "--logdir", str(tmp_path / "logs"))
    assert result.returncode == 0, result.stderr
    assert f"imported mindformers-tensorboard into {tmp_path / 'logs' / 'mf_tb'}" in result.stdout
    assert "train/loss: 5 points, steps 1..5" in result.stdout
    assert "import/B-samples-per-day: 5 points, steps 1..5" in result.stdout
    ours = read_scalars(tmp_path / "logs" / "mf_tb")
    assert ours["train/loss"] == read_scalars(tmp_path / "mf_tb")["loss"]
    again = mftb_import(str(tmp_path / "mf_tb"), "--logdir", str(tmp_path / "logs"), "--name", "second")
    assert again.returncode == 0 and (tmp_path / "logs" / "second").is_dir()


def test_unusable_input_exits_2_with_the_reason(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    for args, message in [
        ((str(notes),), f"mftb import: error: {notes}: not in a format mftb import reads; tried: tensorboard"),
        ((str(tmp_path / "absent"),), "no such file or folder"),
        ((str(tmp_path), "--name", "a/b"), "--name must be a folder name"),
    ]:
        result = mftb_import(*args, "--logdir", str(tmp_path / "logs"))
        assert result.returncode == 2, result
        assert message in result.stderr
        assert "Traceback" not in result.stderr


def test_default_name_from_the_source(tmp_path: Path) -> None:
    (tmp_path / "llama_run" / "log" / "rank_3").mkdir(parents=True)
    (tmp_path / "llama_run" / "log" / "rank_3" / "info.log.2").write_text("")
    (tmp_path / "pretrain_gpt.log").write_text("")
    (tmp_path / "qwen-sft").mkdir()
    (tmp_path / "qwen-sft" / "trainer_state.json").write_text("{}")
    assert default_name(tmp_path / "llama_run" / "log" / "rank_3" / "info.log.2") == "llama_run"
    assert default_name(tmp_path / "pretrain_gpt.log") == "pretrain_gpt"
    assert default_name(tmp_path / "qwen-sft" / "trainer_state.json") == "qwen-sft"
    assert default_name(tmp_path / "qwen-sft") == "qwen-sft"
