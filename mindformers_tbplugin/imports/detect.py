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
from mindformers_tbplugin.imports import tensorboard_folder
from mindformers_tbplugin.imports.imported_run import ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline.metrics import TRAIN_LOSS

FIRST_BYTES = 1 << 16  # what a sniffer sees of each file
# The formats tried, in this order (a file is given to the first whose sniffer accepts it).
FORMATS: list[SourceFormat] = [
    tensorboard_folder.FORMAT,
]
_ROTATED = re.compile(r"^(?P<base>.+?)(?:\.(?P<part>\d+))?$")
# Where a rank's files live: MindFormers' output/log/rank_N/, msrun's worker_N.log, our rank_N/ runs.
_RANK_PART = re.compile(r"^(?:rank_?(?P<rank>\d+)|worker_(?P<worker>\d+)\.log(?:\.\d+)?)$")

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
    main, nested = _main_and_nested(paths, unranked)
    subs: dict[int, ImportedRun] = {}
    notes: list[str] = []
    for rank in sorted(ranked):
        runs = [(_describe(fmt, files), fmt.read(files)) for fmt, files in ranked[rank]]
        with_points = [pair for pair in runs if pair[1].scalars] or runs
        subs[rank] = with_points[0][1]
        for where, _ in with_points[1:]:
            notes.append(f"{where}: rank {rank} again; {with_points[0][0]} was imported")
    if main is None and len(subs) == 1:
        rank, main = subs.popitem()
        main.notes.append(f"rank {rank}'s files")
    elif main is None:
        main = _main_of_ranks(paths, subs)
    main.sub_runs.update({f"rank_{rank}": run for rank, run in subs.items()})
    main.sub_runs.update(nested)
    main.notes.extend(notes)
    return main


def _main_and_nested(paths: list[Path], unranked: list[_Group]) -> tuple[ImportedRun | None, dict[str, ImportedRun]]:
    """The run outside any rank's place, and the runs in folders under it (a run folder's ``baseline``
    sub-run) by their relative folder; several runs side by side are an error."""
    if not unranked:
        return None, {}
    unranked = sorted(unranked, key=lambda group: len(group[1][0].parts))
    top = unranked[0][1][0].parent
    outside = [
        group for group in unranked[1:] if not group[1][0].parent.is_relative_to(top) or group[1][0].parent == top
    ]
    if outside:
        listing = "; ".join(f"{_describe(fmt, files)} ({fmt.name})" for fmt, files in unranked)
        raise UsageError(f"{', '.join(map(str, paths))} holds several runs: {listing}. Name the one to import.")
    nested = {group[1][0].parent.relative_to(top).as_posix(): group[0].read(group[1]) for group in unranked[1:]}
    return unranked[0][0].read(unranked[0][1]), nested


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


def _describe(fmt: SourceFormat, files: list[Path]) -> str:
    """A log by its file, a folder's files by the folder."""
    return str(files[0]) if fmt.rotated else f"{files[0].parent}/"


def _main_of_ranks(paths: list[Path], subs: dict[int, ImportedRun]) -> ImportedRun:
    """The main run of a source made only of ranks: the lowest rank that has a loss (what a comparison
    reads first), every rank kept as its own sub-run."""
    first = next(iter(subs.values()))
    shown = next((rank for rank, run in subs.items() if TRAIN_LOSS in run.scalars), next(iter(subs)))
    chosen = subs[shown]
    main = ImportedRun(source=list(paths), format=first.format)
    main.scalars = {tag: dict(series) for tag, series in chosen.scalars.items()}
    main.wall_times = dict(chosen.wall_times)
    main.averaged_over = dict(chosen.averaged_over)
    main.resolution = dict(chosen.resolution)
    main.notes.append(f"the main run shows rank {shown}'s values; every rank is its rank_<id> sub-run")
    for rank, run in subs.items():
        main.skipped.extend(f"rank {rank}: {what}" for what in run.skipped)
        if run.stopped_at:
            main.stopped_at = "; ".join(filter(None, [main.stopped_at, f"rank {rank}: {run.stopped_at}"]))
    return main
