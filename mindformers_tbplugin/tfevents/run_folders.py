"""Where runs live: finding run folders, absolute log roots, run folder names, resume lookup,
retention, disk checks."""

from __future__ import annotations

import errno
import os
import re
import shutil
import string
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

RUN_NAME_FIELDS = ("experiment", "timestamp", "rank")
TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"
LOG_DIR_ENV = "MFTB_LOG_DIR"
DEFAULT_LOG_DIR = "./output/tensorboard"  # when neither the config nor the launcher names a folder
BASELINE_RUN = "baseline"  # <run>/baseline: the points of the run a training is compared with
EVENT_FILE_MARKER = "tfevents"  # TensorBoard opens only files whose name contains it
_NOT_RUNS = {".git", ".venv", "venv", "node_modules", "__pycache__", "site-packages", ".cache"}


def event_files(run_dir: Path) -> list[Path]:
    """The run's event files in the order TensorBoard reads them (by name: the name starts with the time)."""
    return sorted(p for p in run_dir.iterdir() if EVENT_FILE_MARKER in p.name and p.is_file())


def walk_runs(
    root: Path, prune: bool = True, max_depth: int | None = None, max_dirs: int | None = None
) -> Iterator[tuple[Path, list[Path]]]:
    """TensorBoard's runs under ``root`` (itself included), in path order: each folder holding event
    files, with its :func:`event_files`.

    ``prune`` skips hidden folders, virtualenvs and caches, which hold no runs but can be huge (for
    searching unknown trees such as the home folder); without it every folder is visited, as
    TensorBoard does.
    """
    for visited, (folder, subdirs, files) in enumerate(os.walk(root), start=1):
        if prune:
            subdirs[:] = [d for d in subdirs if d not in _NOT_RUNS and not d.startswith(".")]
        subdirs.sort()
        if max_depth is not None and len(Path(folder).relative_to(root).parts) >= max_depth:
            subdirs.clear()
        if any(EVENT_FILE_MARKER in name for name in files):
            yield Path(folder), event_files(Path(folder))
        if max_dirs is not None and visited >= max_dirs:
            return


def absolute_path(path: str) -> Path:
    """``path`` with ``~`` expanded, made absolute against the current directory *now*."""
    return Path(os.path.abspath(os.path.expanduser(path)))


def log_root(log_dir: str | None) -> Path:
    """Where runs go, made absolute now: the ``log_dir`` the config gives; without one, the folder the
    msrun launcher chose (``MFTB_LOG_DIR``: ``<output_dir>/tensorboard``, beside the per-rank logs),
    else ``./output/tensorboard``."""
    if log_dir:
        return absolute_path(log_dir)
    return absolute_path(os.environ.get(LOG_DIR_ENV, "").strip() or DEFAULT_LOG_DIR)


def is_non_ascii(path: Path) -> bool:
    return not str(path).isascii()


def unknown_run_name_fields(pattern: str) -> list[str]:
    """Placeholders in ``pattern`` that we do not fill (empty when the pattern is fine)."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(pattern) if name is not None]
    except ValueError as exc:
        return [f"<{exc}>"]
    return [name for name in fields if name not in RUN_NAME_FIELDS]


def run_name(pattern: str, experiment: str, rank: int, now: datetime | None = None) -> str:
    now = now or datetime.now()
    return pattern.format(experiment=experiment, timestamp=now.strftime(TIMESTAMP_FORMAT), rank=rank)


def create_run_dir(root: Path, name: str) -> Path:
    """Create ``root/name``; if it exists (two starts in one second), append ``-1``, ``-2``, ..."""
    root.mkdir(parents=True, exist_ok=True)
    candidate = root / name
    suffix = 0
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            suffix += 1
            candidate = root / f"{name}-{suffix}"


def collision_suffix(run_dir: Path, name: str) -> int:
    """The ``-N`` that :func:`create_run_dir` appended to ``name`` (0 for none)."""
    tail = run_dir.name[len(name) :]
    return int(tail[1:]) if tail.startswith("-") and tail[1:].isdigit() else 0


def unwritable_reason(root: Path) -> str | None:
    """Why files cannot be created under ``root`` (creating it if missing), or None if they can."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return "it exists and is not a directory"
    except OSError as exc:
        return exc.strerror or str(exc)
    if not root.is_dir():
        return "it exists and is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=root, prefix=".mftb-probe-"):
            pass
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return f"no permission to create files ({exc.strerror})"
        return exc.strerror or str(exc)
    return None


def run_name_regex(pattern: str, experiment: str) -> re.Pattern[str]:
    """Folder names ``pattern`` produces for ``experiment`` (any time, rank, collision suffix)."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(pattern):
        parts.append(re.escape(literal))
        if field == "experiment":
            parts.append(re.escape(experiment))
        elif field == "timestamp":
            parts.append(r"\d{8}-\d{6}")
        elif field == "rank":
            parts.append(r"\d+")
    return re.compile("".join(parts) + r"(?:-\d+)?")


def _last_activity(run_dir: Path) -> float:
    """When the run was last written: the newest event file's mtime (the folder's if none)."""
    return max((path.stat().st_mtime for path in event_files(run_dir)), default=run_dir.stat().st_mtime)


def experiment_runs(root: Path, pattern: str, experiment: str) -> list[Path]:
    """Run folders of ``experiment`` under ``root``, oldest activity first."""
    if not root.is_dir():
        return []
    regex = run_name_regex(pattern, experiment)
    runs = [entry for entry in root.iterdir() if entry.is_dir() and regex.fullmatch(entry.name)]
    return sorted(runs, key=lambda run: (_last_activity(run), run.name))


def apply_retention(runs: list[Path], keep: int, archive_dir: Path | None, protect: Path) -> list[Path]:
    """Remove (or move to ``archive_dir``) all but the newest ``keep`` of ``runs``; never ``protect``.
    Returns the runs that were removed or moved."""
    candidates = [run for run in runs if run != protect]
    excess = candidates[: max(len(candidates) - max(keep - 1, 0), 0)]
    for run in excess:
        if archive_dir is None:
            shutil.rmtree(run)
        else:
            archive_dir.mkdir(parents=True, exist_ok=True)
            target = archive_dir / run.name
            suffix = 0
            while target.exists():
                suffix += 1
                target = archive_dir / f"{run.name}.{suffix}"
            shutil.move(str(run), str(target))
    return excess


def free_gb(path: Path) -> float:
    return shutil.disk_usage(path).free / float(1 << 30)
