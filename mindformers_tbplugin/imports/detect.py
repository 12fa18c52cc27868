"""STAND-IN until the format registry lands: reads a folder of event files only."""

from __future__ import annotations

from pathlib import Path

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.imported_run import ImportedRun
from mindformers_tbplugin.tfevents import run_folders
from mindformers_tbplugin.tfevents.reader import EventFileReader


def read_source(paths: list[Path]) -> ImportedRun:
    (path,) = paths
    if not path.is_dir() or not run_folders.event_files(path):
        raise UsageError(f"{path}: no known format (tried: TensorBoard event files)")
    run = ImportedRun(source=[path], format="tensorboard")
    for file in run_folders.event_files(path):
        for tag, step, value, wall in EventFileReader(file).read():
            run.add(tag, step, value)
            run.wall_times.setdefault(step, wall)
    return run
