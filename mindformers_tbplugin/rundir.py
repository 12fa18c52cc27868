"""Where runs live: absolute log roots, run folder names, writability checks."""

from __future__ import annotations

import errno
import os
import string
import tempfile
from datetime import datetime
from pathlib import Path

RUN_NAME_FIELDS = ("experiment", "timestamp", "rank")
TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"
LOG_DIR_ENV = "MFTB_LOG_DIR"


def absolute_path(path: str) -> Path:
    """``path`` with ``~`` expanded, made absolute against the current directory *now*."""
    return Path(os.path.abspath(os.path.expanduser(path)))


def log_root(log_dir: str) -> Path:
    """Where runs go: ``log_dir`` made absolute now, unless the launcher set ``MFTB_LOG_DIR``
    (``scripts/msrun_launch.sh`` does, so TensorBoard runs sit beside the per-rank logs)."""
    override = os.environ.get(LOG_DIR_ENV, "").strip()
    return absolute_path(override or log_dir)


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
