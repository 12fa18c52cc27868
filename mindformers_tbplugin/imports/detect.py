"""The format registry: which reader reads a source, told from the files' first bytes, never their names.

A source is what ``mftb import`` (and a comparison's RUN or BASELINE) names: files and folders. A
folder is expanded into the files under it; files of one format are grouped into runs (a folder's
event or summary files; a log and its rotated parts), and a run found in a rank's place
(``rank_<id>/``, ``worker_<id>.log``) becomes that rank's sub-run.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports import (
    hf_trainer_state,
    megatron_log,
    mindformers_log,
    mindspore_summary,
    tensorboard_folder,
)
from mindformers_tbplugin.imports.imported_run import ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline import metrics as m

FIRST_BYTES = 1 << 16  # what a sniffer sees of each file
# The formats tried, in this order (a file is given to the first whose sniffer accepts it).
FORMATS: list[SourceFormat] = [
    tensorboard_folder.FORMAT,
    mindspore_summary.FORMAT,
    hf_trainer_state.FORMAT,
    mindformers_log.FORMAT,
    megatron_log.FORMAT,
]
_ROTATED = re.compile(r"^(?P<base>.+?)(?:\.(?P<part>\d+))?$")
# Where a rank's files live: MindFormers' output/log/rank_N/, msrun's worker_N.log, our rank_N/ runs.
_RANK_PART = re.compile(r"^(?:rank_?(?P<rank>\d+)|worker_(?P<worker>\d+)\.log(?:\.\d+)?)$")

# Averaged over the ranks in a multi-rank source's main run, as the monitor averages them over data-parallel
# ranks (under pipeline parallelism only the last stage's are valid: its ranks' sub-runs are the ones to read).
DATA_PARALLEL_MEAN = (m.TRAIN_LOSS, m.TRAIN_LOSS_LM, m.TRAIN_LOSS_MTP, m.TRAIN_LOSS_AUX, m.TRAIN_LOSS_INDEXER)
_Group = tuple[SourceFormat, list[Path]]  # a format and one run's files, in reading order


def format_names() -> str:
    return ", ".join(f"{fmt.name} ({fmt.description})" for fmt in FORMATS)


def sniff(path: Path) -> SourceFormat | None:
    """The format of one file, from its first bytes; None when no reader knows it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(FIRST_BYTES)
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    return next((fmt for fmt in FORMATS if fmt.sniff(path, head)), None)


def read_source(paths: list[Path]) -> ImportedRun:
    """One run from the files and folders of one source; several ranks become ``rank_<id>`` sub-runs.

    Raises UsageError (exit 2) for a path that does not exist, a file of no known format, a folder
    holding none, or a folder holding several unrelated runs.
    """
    if not paths:
        raise UsageError("no source given")
    ranked: dict[int, list[_Group]] = defaultdict(list)
    unranked: list[_Group] = []
    for fmt, files, rank in _groups([Path(p) for p in paths]):
        (ranked[rank] if rank is not None else unranked).append((fmt, files))
    main = _one_run(paths, unranked, None) if unranked else None
    subs = {rank: _one_run(paths, groups, rank) for rank, groups in sorted(ranked.items())}
    if main is None and len(subs) == 1:
        rank, main = subs.popitem()
        main.notes.append(f"rank {rank}'s files")
    elif main is None:
        main = _main_of_ranks(paths, subs)
    main.sub_runs.update({f"rank_{rank}": run for rank, run in subs.items()})
    return main


def _one_run(paths: list[Path], groups: list[_Group], rank: int | None) -> ImportedRun:
    """The run of one rank (or of no rank's place): the group highest in the folder tree, with the
    TensorBoard folders below it as its sub-runs by relative folder (a run folder's ``baseline``;
    tensorboardX's ``add_scalars`` folders). Two groups side by side are two copies of a rank's logs
    (``rank_0/info.log``, ``worker_0.log``: the one with most points is read) or, outside ranks, an error."""
    groups = sorted(groups, key=lambda group: len(group[1][0].parts))
    roots = [group for group in groups if not any(_below(group, other) for other in groups)]
    if len(roots) > 1 and rank is None:
        listing = "; ".join(f"{_describe(fmt, files)} ({fmt.name})" for fmt, files in roots)
        raise UsageError(f"{', '.join(map(str, paths))} holds several runs: {listing}. Name the one to import.")
    read = [(group, group[0].read(group[1])) for group in sorted(roots, key=lambda group: group[1][0])]
    # Rotated logs lose their oldest parts; an msrun worker log keeps all: the copy with most points wins.
    (fmt, files), run = max(read, key=lambda pair: sum(map(len, pair[1].scalars.values())))
    for other, _ in read:
        if other[1] != files:
            run.notes.append(f"{_describe(*other)}: rank {rank} again; {_describe(fmt, files)} was imported")
    top = files[0].parent
    for below_fmt, below in groups:
        if not _below((below_fmt, below), (fmt, files)):
            continue
        if below_fmt.name == tensorboard_folder.NAME:
            run.sub_runs[below[0].parent.relative_to(top).as_posix()] = below_fmt.read(below)
        else:  # a Trainer's checkpoint-N/trainer_state.json: an earlier copy of the state
            run.notes.append(
                f"{_describe(below_fmt, below)} ({below_fmt.name}) under it is not imported; name it to import it"
            )
    return run


def _below(group: _Group, other: _Group) -> bool:
    """``group``'s files are in a folder strictly under ``other``'s."""
    folder, other_folder = group[1][0].parent, other[1][0].parent
    return folder != other_folder and folder.is_relative_to(other_folder)


def _groups(paths: list[Path]) -> list[tuple[SourceFormat, list[Path], int | None]]:
    """The runs in ``paths``: files sniffed, grouped per format and folder (or rotation chain), each
    with the rank whose place it is in (judged below the folder named, or from a named file's folder)."""
    chains: dict[tuple[str, Path, str], list[Path]] = defaultdict(list)
    ranks: dict[tuple[str, Path, str], int | None] = {}
    by_name = {fmt.name: fmt for fmt in FORMATS}
    for given in paths:
        if not given.exists():
            raise UsageError(f"{given}: no such file or folder")
        found = 0
        anchor = given.parent
        for path in sorted(p for p in given.rglob("*") if p.is_file()) if given.is_dir() else [given]:
            fmt = sniff(path)
            if fmt is None:
                if not given.is_dir():
                    raise UsageError(f"{path}: not in a format mftb import reads; tried: {format_names()}")
                continue
            found += 1
            key = (fmt.name, path.parent, _ROTATED.match(path.name)["base"] if fmt.rotated else "")
            chains[key].append(path)
            ranks[key] = _rank_of(path.relative_to(anchor).parts if given.is_dir() else path.parts[-2:])
        if not found:
            raise UsageError(f"{given}: holds no file in a format mftb import reads; tried: {format_names()}")
    return [
        (by_name[key[0]], sorted(set(files), key=_age if by_name[key[0]].rotated else None), ranks[key])
        for key, files in chains.items()
    ]


def _age(path: Path) -> tuple[int, str]:
    """Oldest first: ``info.log.3``, ``info.log.2``, ``info.log.1``, then ``info.log`` (the newest)."""
    part = _ROTATED.match(path.name)["part"]
    return (-int(part) if part else 0, path.name)


def _rank_of(parts: tuple[str, ...]) -> int | None:
    """The rank whose files these are, from the nearest rank-like part of the path."""
    for part in reversed(parts):
        match = _RANK_PART.match(part)
        if match:
            return int(match["rank"] or match["worker"])
    return None


def _mean_per_step(series: list[dict[int, float]]) -> dict[int, float]:
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for points in series:
        for step, value in points.items():
            sums[step] += value
            counts[step] += 1
    return {step: sums[step] / counts[step] for step in sorted(sums)}


def _describe(fmt: SourceFormat, files: list[Path]) -> str:
    """A log by its file, a folder's files by the folder."""
    return str(files[0]) if fmt.rotated else f"{files[0].parent}/"


def _main_of_ranks(paths: list[Path], subs: dict[int, ImportedRun]) -> ImportedRun:
    """The main run of a source made only of ranks, as a monitored run's: the loss and its parts are
    the mean over the ranks that print them at each step (the data-parallel mean loss; each rank's
    own is its sub-run), every other tag is the highest rank's that has a loss (the model's values,
    the same on every rank; Megatron-LM prints on its last rank only)."""
    first = next(iter(subs.values()))
    with_loss = [rank for rank, run in subs.items() if m.TRAIN_LOSS in run.scalars]
    shown = max(with_loss) if with_loss else min(subs)
    chosen = subs[shown]
    main = ImportedRun(source=list(paths), format=first.format)
    main.scalars = {tag: dict(series) for tag, series in chosen.scalars.items()}
    main.wall_times = dict(chosen.wall_times)
    main.averaged_over = dict(chosen.averaged_over)
    main.resolution = dict(chosen.resolution)
    for tag in DATA_PARALLEL_MEAN:
        series = [run.scalars[tag] for run in subs.values() if tag in run.scalars]
        if len(series) > 1:
            main.scalars[tag] = _mean_per_step(series)
    averaged = sorted(tag for tag in DATA_PARALLEL_MEAN if sum(tag in run.scalars for run in subs.values()) > 1)
    if averaged:
        main.notes.append(f"{', '.join(averaged)}: the mean over the ranks that print them at each step")
    main.notes.append(f"the main run's other tags are rank {shown}'s; every rank is its rank_<id> sub-run")
    for rank, run in subs.items():
        main.skipped.extend(f"rank {rank}: {what}" for what in run.skipped)
        main.notes.extend(f"rank {rank}: {note}" for note in run.notes)
        if run.stopped_at:
            main.stopped_at = "; ".join(filter(None, [main.stopped_at, f"rank {rank}: {run.stopped_at}"]))
    return main
