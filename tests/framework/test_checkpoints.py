"""The checkpoints a training's checkpoint callbacks saved (framework/checkpoints.py): their folders from
the callbacks (duck-typed on MindSpore's ModelCheckpoint), and the newest saved before a step."""

from __future__ import annotations

from pathlib import Path

from mindformers_tbplugin.framework.checkpoints import CallbackCheckpoints, checkpoint_folders, checkpoints_of


class CheckpointMonitor:  # the attribute MindSpore's ModelCheckpoint keeps its folder in
    def __init__(self, directory: str) -> None:
        self._directory = directory


class MFLossMonitor:
    _directory = "/not/a/checkpoint/callback"


def test_folders_come_from_the_checkpoint_callbacks_only(tmp_path: Path) -> None:
    callbacks = [MFLossMonitor(), CheckpointMonitor(str(tmp_path / "rank_0")), CheckpointMonitor("")]
    assert checkpoint_folders(callbacks) == [tmp_path / "rank_0"]
    assert checkpoint_folders(None) == []


def test_steps_count_across_epochs_and_only_earlier_steps_qualify(tmp_path: Path) -> None:
    folder = tmp_path / "rank_3"
    folder.mkdir()
    for name in ("m-1_10.ckpt", "m-2_5.ckpt", "m-2_10.ckpt"):
        (folder / name).write_bytes(b"")
    assert CallbackCheckpoints([folder], 10).last_saved_before(20).step == 15  # m-2_10 is step 20 itself
    assert CallbackCheckpoints([folder], None).last_saved_before(20).step == 10  # epochs unknown: as named
    assert CallbackCheckpoints([folder], 10).last_saved_before(10) is None
    assert CallbackCheckpoints([tmp_path / "never_created"], 10).last_saved_before(10) is None


def test_the_pynative_trainer_saves_under_its_checkpoint_save_path_when_saving_is_on(tmp_path: Path) -> None:
    on = {"checkpoint": {"enable_save": True, "save_path": str(tmp_path / "ckpt")}}
    assert checkpoints_of(False, None, None, on).save_path == tmp_path / "ckpt"
    off = {"checkpoint": {"enable_save": False, "save_path": str(tmp_path / "ckpt")}}
    assert checkpoints_of(False, None, None, off).last_saved_before(10) is None
    assert checkpoints_of(False, None, None, {}).last_saved_before(10) is None
