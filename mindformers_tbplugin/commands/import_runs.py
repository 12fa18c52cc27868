"""``mftb import``: runs users already have (other tools' folders, summary files, logs) as one run
folder of ours, under our tag names."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mindformers_tbplugin.imports.imported_run import ImportedRun

NAME = "import"
HELP = "bring runs from other tools (TensorBoard folders, MindSpore summaries, logs) in as a run folder"
DESCRIPTION = (
    "Reads SOURCE (files or folders; the format is told from the content) and writes one run folder "
    "LOGDIR/NAME under the tag names TensorBoardMonitor writes, so that imported and monitored runs overlay "
    "in TensorBoard's charts; tags of no equivalent keep their name under import/, a text import/source says "
    "where the run came from and what was not imported. Several ranks become rank_<id> sub-runs. Exit "
    "status 0, or 2 when a source cannot be used."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="+", metavar="SOURCE", help="files or folders of one run")
    parser.add_argument("--logdir", required=True, help="folder to write the run folder into (TensorBoard's logdir)")
    parser.add_argument("--name", help="run folder name (default: from the first SOURCE)")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.imports.collector_pause import collector_paused
    from mindformers_tbplugin.imports.detect import read_source
    from mindformers_tbplugin.imports.run_writer import write_run

    sources = [Path(source) for source in args.sources]
    name = args.name or default_name(sources[0])
    if not name or "/" in name or name in (".", ".."):
        raise UsageError(f"--name must be a folder name, got {name!r}")
    with collector_paused():
        imported = read_source(sources)
        if not imported.scalars and not any(sub.scalars for sub in imported.sub_runs.values()):
            raise UsageError(f"{', '.join(args.sources)}: no scalar point to import ({imported.format})")
        folders = write_run(imported, Path(args.logdir) / name)
    print(f"imported {imported.format} into {folders[0]}")
    for folder, run_ in zip(folders, [imported, *imported.sub_runs.values()], strict=True):
        print(summary(run_, folder))
    return 0


def default_name(source: Path) -> str:
    """The run's name from its source: the folder's or file's name, less rotation and file suffixes; a
    file called after its role (``info.log``, ``worker_0.log``, ``trainer_state.json``, an event file)
    takes the name of the first folder above it that is not a rank's or a log folder."""
    path = source.resolve()
    if path.is_dir():
        return _clean(path.name)
    stem = re.sub(r"(\.(log|json|txt))?(\.\d+)?$", "", path.name)
    if stem in ("info", "error", "trainer_state") or stem.startswith(("events.", "worker_")) or ".summary." in stem:
        folder = path.parent
        while re.fullmatch(r"rank_?\d+|log|logs|msrun_log", folder.name) and folder.parent != folder:
            folder = folder.parent
        stem = folder.name
    return _clean(stem)


def _clean(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "imported"


def summary(run: ImportedRun, folder: Path) -> str:
    """Points per tag, what was skipped and where a file stopped."""
    lines = [f"  {folder.name}:"]
    for tag, series in sorted(run.scalars.items()):
        steps = sorted(series)
        mean = f", each a mean of {run.averaged_over[tag]} steps" if tag in run.averaged_over else ""
        lines.append(f"    {tag}: {len(steps)} points, steps {steps[0]}..{steps[-1]}{mean}")
    for family, items in (("histograms", run.histograms), ("images", run.images), ("texts", run.texts)):
        if items:
            lines.append(f"    {family}: {', '.join(sorted(items))}")
    lines += [f"    note: {note}" for note in run.notes]
    lines += [f"    skipped: {what}" for what in run.skipped]
    if run.stopped_at:
        lines.append(f"    truncated: {run.stopped_at}")
    return "\n".join(lines)
