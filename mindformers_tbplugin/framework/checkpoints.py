"""The checkpoints a training has saved, found where its trainer saves them, and the YAML lines that
resume from one. An incident names the last one saved before its step; the folder is read only then
(an alert is rare), never per step.

* Classic trainer: MindSpore's ``ModelCheckpoint`` and MindFormers' ``CheckpointMonitor`` (a subclass)
  keep their folder in ``_directory`` and name each file ``<prefix>-<epoch>_<step in epoch>.<format>``
  (MindFormers' folder is ``<output_dir>/checkpoint/rank_<id>``). A resume loads it with
  ``load_checkpoint`` + ``resume_training`` and skips the data up to a step with ``data_skip_steps``.
* MindFormers 2.x's PyNative trainer: its CheckpointCallback saves into ``checkpoint.save_path``, one
  folder ``iteration_<step, 8 digits>`` per save, complete once rank 0 wrote its ``common.json``. A
  resume loads it with ``checkpoint.load_path`` (the folder) and ``no_load_optim: False`` (the step and
  the data position are restored with the optimizer). That trainer has no key that skips data: it reads
  from the checkpoint's step on, so the incident says so rather than inventing one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_NAME = re.compile(r"-(\d+)_(\d+)\.(ckpt|safetensors)$")
_RANK_FOLDER = re.compile(r"rank_\d+")
_ITERATION = re.compile(r"iteration_(\d+)")
ITERATION_COMPLETE = "common.json"  # written by rank 0 once the iteration's files are saved


@dataclass(frozen=True)
class SavedCheckpoint:
    step: int  # the global step it was saved after
    path: Path
    load_folder: Path  # what the trainer's load key takes


@dataclass(frozen=True)
class Resume:
    lines: list[str]  # YAML that resumes from the checkpoint
    note: str | None = None  # what the lines cannot do (no key skips the bad batch), when so


class Checkpoints(Protocol):
    def last_saved_before(self, step: int) -> SavedCheckpoint | None: ...

    def resume(self, saved: SavedCheckpoint, step: int) -> Resume: ...


def checkpoint_folders(callbacks: Iterable[object] | None) -> list[Path]:
    """The folders the classic training's checkpoint callbacks save into."""
    folders = []
    for callback in callbacks or ():
        folder = getattr(callback, "_directory", None)
        if "Checkpoint" in type(callback).__name__ and isinstance(folder, str) and folder:
            folders.append(Path(folder).resolve())
    return folders


class CallbackCheckpoints:
    """The classic trainer's: files named by epoch and step in the checkpoint callbacks' folders."""

    def __init__(self, folders: list[Path], steps_per_epoch: int | None) -> None:
        self.folders = folders
        self.steps_per_epoch = steps_per_epoch

    def last_saved_before(self, step: int) -> SavedCheckpoint | None:
        """The newest checkpoint file saved after a step earlier than ``step`` (its state has not trained on
        ``step``'s batch). Steps are counted from the file names: ``(epoch - 1) x steps_per_epoch + step in
        epoch`` (one epoch when the number of steps per epoch is not known)."""
        found: list[SavedCheckpoint] = []
        for folder in self.folders:
            try:
                names = os.listdir(folder)
            except OSError:  # not created yet (nothing saved) or gone
                continue
            for name in names:
                match = _NAME.search(name)
                if match is None:
                    continue
                epoch, in_epoch = int(match.group(1)), int(match.group(2))
                saved = (epoch - 1) * self.steps_per_epoch + in_epoch if self.steps_per_epoch else in_epoch
                if saved < step:
                    load = folder.parent if _RANK_FOLDER.fullmatch(folder.name) else folder
                    found.append(SavedCheckpoint(saved, folder / name, load))
        return max(found, key=lambda saved: (saved.step, saved.path.stat().st_mtime), default=None)

    def resume(self, saved: SavedCheckpoint, step: int) -> Resume:
        """MindFormers' YAML to resume from ``saved`` and read the data from the step after ``step`` on."""
        return Resume(
            [
                f"load_checkpoint: '{saved.load_folder}'",
                f"resume_training: '{saved.path.name}'",
                "ignore_data_skip: False",
                f"data_skip_steps: {step}",
            ]
        )


class IterationCheckpoints:
    """MindFormers 2.x's PyNative trainer's: ``iteration_<step>`` folders under ``checkpoint.save_path``."""

    def __init__(self, save_path: Path | None) -> None:
        """``save_path``: None when the training saves nothing."""
        self.save_path = save_path

    def last_saved_before(self, step: int) -> SavedCheckpoint | None:
        if self.save_path is None:
            return None
        try:
            names = os.listdir(self.save_path)
        except OSError:  # nothing saved yet
            return None
        found = []
        for name in names:
            match = _ITERATION.fullmatch(name)
            folder = self.save_path / name
            if match and int(match.group(1)) < step and (folder / ITERATION_COMPLETE).is_file():
                found.append(SavedCheckpoint(int(match.group(1)), folder, folder))
        return max(found, key=lambda saved: saved.step, default=None)

    def resume(self, saved: SavedCheckpoint, step: int) -> Resume:
        lines = ["checkpoint:", f"  load_path: '{saved.load_folder}'", "  no_load_optim: False"]
        note = (
            f"MindFormers' PyNative trainer has no key that skips data: from this checkpoint it reads the batches "
            f"of steps {saved.step + 1} to {step} again, the batch of step {step} included"
        )
        return Resume(lines, note)


def checkpoints_of(trainer_is_classic: bool, callbacks: Any, steps_per_epoch: int | None, config: Any) -> Checkpoints:
    """Where the training saves: the classic trainer's callbacks' folders, or the PyNative trainer's
    ``checkpoint.save_path`` (``config``: its config as a mapping; relative to the working directory)."""
    if trainer_is_classic:
        return CallbackCheckpoints(checkpoint_folders(callbacks), steps_per_epoch)
    section = config.get("checkpoint") if hasattr(config, "get") else None
    save_path = section.get("save_path") if hasattr(section, "get") else None
    enabled = section.get("enable_save", True) if hasattr(section, "get") else False
    return IterationCheckpoints(Path(os.path.realpath(save_path)) if enabled and save_path else None)
