"""The checkpoints a training's checkpoint callbacks saved (framework/checkpoints.py): their folders from
the callbacks (duck-typed on MindSpore's ModelCheckpoint), and the newest saved before a step."""

from __future__ import annotations

from pathlib import Path

from mindformers_tbplugin.framework.checkpoints import checkpoint_folders, last_saved_before


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
    assert last_saved_before([folder], 20, 10).step == 15  # m-2_10 is step 20 itself: already trained on it
    assert last_saved_before([folder], 20, None).step == 10  # epochs unknown: steps as named
    assert last_saved_before([folder], 10, 10) is None
    assert last_saved_before([tmp_path / "never_created"], 10, 10) is None
