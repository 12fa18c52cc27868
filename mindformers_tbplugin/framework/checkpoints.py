"""The checkpoints a training has saved, found where its checkpoint callbacks save them.

MindSpore's ``ModelCheckpoint`` and MindFormers' ``CheckpointMonitor`` (a subclass) keep their folder in
``_directory`` and name each file ``<prefix>-<epoch>_<step in epoch>.<format>`` (MindFormers' folder is
``<output_dir>/checkpoint/rank_<id>``). An incident names the last one saved before its step; the
folder is read only then (an alert is rare), never per step.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"-(\d+)_(\d+)\.(ckpt|safetensors)$")
_RANK_FOLDER = re.compile(r"rank_\d+")


@dataclass(frozen=True)
class SavedCheckpoint:
    step: int  # the global step it was saved after
    path: Path
    load_folder: Path  # what MindFormers' load_checkpoint takes: the folder holding rank_<id>/ when there is one


def checkpoint_folders(callbacks: Iterable[object] | None) -> list[Path]:
    """The folders the training's checkpoint callbacks save into."""
    folders = []
    for callback in callbacks or ():
        folder = getattr(callback, "_directory", None)
        if "Checkpoint" in type(callback).__name__ and isinstance(folder, str) and folder:
            folders.append(Path(folder).resolve())
    return folders


def last_saved_before(folders: list[Path], step: int, steps_per_epoch: int | None) -> SavedCheckpoint | None:
    """The newest checkpoint file saved after a step earlier than ``step`` (its state has not trained on
    ``step``'s batch). Steps are counted from the file names: ``(epoch - 1) x steps_per_epoch + step in
    epoch`` (one epoch when the number of steps per epoch is not known)."""
    found: list[SavedCheckpoint] = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:  # not created yet (nothing saved) or gone
            continue
        for name in names:
            match = _NAME.search(name)
            if match is None:
                continue
            epoch, in_epoch = int(match.group(1)), int(match.group(2))
            saved = (epoch - 1) * steps_per_epoch + in_epoch if steps_per_epoch else in_epoch
            if saved < step:
                load = folder.parent if _RANK_FOLDER.fullmatch(folder.name) else folder
                found.append(SavedCheckpoint(saved, folder / name, load))
    return max(found, key=lambda saved: (saved.step, saved.path.stat().st_mtime), default=None)
