"""The checks behind ``mftb doctor``: what users otherwise find out by hand when TensorBoard shows nothing or nonsense.

Each check returns a :class:`Verdict` with what it found and how to fix it. Event files are read once,
streaming (:func:`mindformers_tbplugin.tfevents.reader.scan_file`); the checks share that one pass.
"""

from __future__ import annotations

import os
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mindformers_tbplugin.tfevents import reader, run_folders
from mindformers_tbplugin.tfevents.records import CORRUPT, TORN
from mindformers_tbplugin.viewer import tensorboard_server

OK, WARN, FAIL = "ok", "warn", "fail"
INFO = "info"  # worth knowing, not a problem of the logs: not counted as a check
OPEN_SECS = 10.0  # a file modified this recently is still being written (TensorBoardMonitor flushes every 5 s)
MAX_LISTED = 5
SEARCH_DEPTH = 5
SEARCH_MAX_DIRS = 20_000
NO_RUNS_FOUND = (
    "no runs found: a training with TensorBoardMonitor writes them to its log_dir, by default ./output/tensorboard "
    "in the folder it runs in (mftb train --config <your.yaml>; the msrun launcher: <output_dir>/tensorboard)"
)
MINDSPORE_SUMMARY_MARK = ".out.events.summary."  # SummaryRecord's files: MindInsight's format, not TensorBoard's


@dataclass
class Verdict:
    check: str
    status: str
    summary: str
    details: list[str] = field(default_factory=list)
    fix: str | None = None


@dataclass
class RunScan:
    path: Path
    files: list[reader.FileScan]
    steps: reader.StepTracker

    @property
    def points(self) -> Counter[str]:
        return sum((scan.points for scan in self.files), Counter())


def scan_logdir(logdir: Path) -> list[RunScan]:
    runs = []
    for run_dir, paths in run_folders.walk_runs(logdir):
        steps = reader.StepTracker()
        files = [reader.scan_file(path, steps) for path in paths]
        runs.append(RunScan(run_dir, files, steps))
    return runs


def _rel(path: Path, logdir: Path) -> str:
    try:
        return str(path.relative_to(logdir)) or "."
    except ValueError:
        return str(path)


# -- event files present -----------------------------------------------------------------------


def check_event_files(logdir: Path, runs: list[RunScan], roots: list, found: list, view: Path | None) -> Verdict:
    if runs:
        count = sum(len(run.files) for run in runs)
        return Verdict("event files", OK, f"{len(runs)} runs, {count} event files under {logdir}")
    nearest, missing = next(p for p in (logdir, *logdir.parents) if p.is_dir()), not logdir.exists()
    where = f"{'does not exist' if missing else 'is not a folder'} (the nearest existing folder is {nearest})"
    where = "holds no *tfevents* files" if nearest == logdir else where
    details = []
    summaries = _summary_files(logdir) if logdir.is_dir() else []
    if summaries:
        details.append(
            f"files of MindSpore's SummaryRecord/SummaryCollector are here, e.g. {summaries[0]}: TensorBoard "
            "cannot read them (MindInsight's format); add TensorBoardMonitor to the YAML callbacks instead"
        )
    details += [f"searched for runs: {root} ({depth} levels down)" for root, depth in roots]
    if found:
        details.append("runs there (newest first):")
        details += [f"  {folder}  (modified {_age(mtime)} ago)" for folder, mtime in found]
    fix = f"point TensorBoard at the runs found: {_view_command(view)}" if found else NO_RUNS_FOUND
    return Verdict("event files", FAIL, f"LOGDIR {logdir} {where}", details, fix)


def _summary_files(logdir: Path) -> list[Path]:
    found = []
    for visited, (folder, _, files) in enumerate(os.walk(logdir), start=1):
        found += [Path(folder) / name for name in files if MINDSPORE_SUMMARY_MARK in name]
        if len(found) >= MAX_LISTED or visited >= SEARCH_MAX_DIRS:
            break
    return found


def search_roots(logdir: Path, given: str) -> list[tuple[Path, int]]:
    """Where runs of the LOGDIR given may be when it holds none, and how many levels down to look: for a
    missing LOGDIR, its nearest existing folder (not /), as deep as LOGDIR's runs would be; for a relative
    LOGDIR, that path from each of the 3 folders above the working directory (where training may have run)."""
    nearest = next(p for p in (logdir, *logdir.parents) if p.is_dir())
    relative = Path(os.path.expanduser(given))
    roots = [(nearest, len(logdir.relative_to(nearest).parts) + 1)] if nearest not in (logdir, Path("/")) else []
    if relative.parts and not relative.is_absolute() and ".." not in relative.parts:
        roots += [(base / relative, SEARCH_DEPTH) for base in Path.cwd().parents[:3] if (base / relative).is_dir()]
    return list(dict.fromkeys(roots))


def find_runs_elsewhere(roots: list[tuple[Path, int]]) -> tuple[list[tuple[Path, float]], Path | None]:
    """The newest run folders under ``roots`` (a ``rank_<id>/`` sub-run counts as its run), and the folder
    to view them: the one above the newest run, or that run itself when it is a searched folder."""
    runs: dict[Path, float] = {}
    for root, depth in roots:
        for run_dir, paths in run_folders.walk_runs(root, max_depth=depth, max_dirs=SEARCH_MAX_DIRS):
            run = next((p for p in run_dir.parents if p in runs), run_dir)
            runs[run] = max([runs.get(run, 0.0)] + [p.stat().st_mtime for p in paths])
    found = sorted(runs.items(), key=lambda item: -item[1])[:MAX_LISTED]
    newest = found[0][0] if found else None
    return found, newest if newest in dict(roots) or newest is None else newest.parent


def _view_command(view: Path | None, options: str = "") -> str:
    return f"mftb tensorboard {shlex.quote(str(view))}{options}" if view else "no runs to view (see event files)"


def _age(mtime: float) -> str:
    seconds = max(0.0, time.time() - mtime)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


# -- complete files ----------------------------------------------------------------------------


def processes_writing(paths: set[Path]) -> dict[Path, str]:
    """Which local process (``pid N (program)``) has each file open for writing, from /proc (Linux only).

    Readers such as TensorBoard's own data server hold the files open too; only write access counts.
    """
    holders: dict[Path, str] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return holders
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                target = Path(os.readlink(fd))
                if target in paths and _opened_for_writing(pid_dir / "fdinfo" / fd.name):
                    name = (pid_dir / "comm").read_text().strip()
                    holders[target] = f"pid {pid_dir.name} ({name})"
        except OSError:  # the process exited, or it is not ours to look at
            continue
    return holders


def _opened_for_writing(fdinfo: Path) -> bool:
    for line in fdinfo.read_text().splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & (os.O_WRONLY | os.O_RDWR) != 0
    return False


def check_complete_files(logdir: Path, runs: list[RunScan]) -> Verdict:
    files = [scan for run in runs for scan in run.files]
    holders = processes_writing({scan.path.resolve() for scan in files})
    now = time.time()
    broken, open_now = [], []
    for scan in files:
        holder = holders.get(scan.path.resolve())
        recent = now - scan.mtime < OPEN_SECS
        name = _rel(scan.path, logdir)
        if holder or recent:
            why = f"open by {holder}" if holder else f"modified {now - scan.mtime:.0f} s ago"
            open_now.append(f"{name}: {why}" + (" (its last record is still being written)" if scan.problem else ""))
        elif scan.problem == TORN:
            broken.append(
                f"{name}: ends inside a record after {scan.records} complete records (byte {scan.valid_bytes}); "
                f"the last {scan.size - scan.valid_bytes} bytes are a torn write (writer killed mid-write?)"
            )
        elif scan.problem == CORRUPT:
            broken.append(
                f"{name}: checksum mismatch at byte {scan.valid_bytes} after {scan.records} records; "
                f"TensorBoard stops reading this file there ({scan.size - scan.valid_bytes} bytes unread)"
            )
    if broken:
        return Verdict(
            "files complete",
            FAIL,
            f"{len(broken)} event files are damaged (torn or failing a checksum)",
            broken[:MAX_LISTED] + open_now[:MAX_LISTED],
            "TensorBoard shows the points before the damage. To keep them and silence the error, cut each file "
            "after its last complete record (truncate -s <byte> FILE, with the byte above); "
            "close writers properly (TensorBoardMonitor does at train end and on SIGTERM, not on SIGKILL)",
        )
    if open_now:
        return Verdict(
            "files complete",
            WARN,
            f"{len(open_now)} event files are still being written",
            open_now[:MAX_LISTED],
            "normal while training runs; if training has ended, its writer was not closed: "
            "end the process with SIGTERM (not SIGKILL) so every queued point reaches the file",
        )
    return Verdict("files complete", OK, f"all {len(files)} event files end with a complete, checksummed record")


# -- one writer per run ------------------------------------------------------------------------


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def check_single_writer(logdir: Path, runs: list[RunScan]) -> Verdict:
    """Two files of one run written at the same time over the same steps: two processes share the folder."""
    clashes = []
    for run in runs:
        spans = [s for s in run.files if s.min_step is not None and s.first_wall is not None]
        for i, a in enumerate(spans):
            for b in spans[i + 1 :]:
                same_time = _overlap((a.first_wall, a.last_wall), (b.first_wall, b.last_wall))
                same_steps = _overlap((a.min_step, a.max_step), (b.min_step, b.max_step))
                if same_time and same_steps:
                    clashes.append(
                        f"{_rel(run.path, logdir)}: {a.path.name} ({a.writer}, steps {a.min_step}-{a.max_step}) "
                        f"and {b.path.name} ({b.writer}, steps {b.min_step}-{b.max_step}) were written "
                        "at the same time"
                    )
    if clashes:
        return Verdict(
            "one writer per run",
            FAIL,
            f"{len(clashes)} pairs of event files written concurrently into one run folder",
            clashes[:MAX_LISTED],
            "TensorBoard merges both into one zig-zag curve. Give each process its own folder: one "
            "TensorBoardMonitor per job (it writes from one rank; rank_policy/per_rank_system write "
            "rank_<id>/ sub-runs), or a distinct log_dir/experiment per job",
        )
    return Verdict("one writer per run", OK, "no run folder has two writers at once")


# -- steps ---------------------------------------------------------------------------------------


def check_steps_forward(logdir: Path, runs: list[RunScan]) -> Verdict:
    problems = []
    for run in runs:
        if run.steps.jumps:
            first, more = run.steps.jumps[0], run.steps.jump_count - 1
            problems.append(
                f"{_rel(run.path, logdir)}: {first.tag} step {first.from_step} -> {first.to_step} in {first.path.name}"
                + (f" (and {more} more)" if more else "")
            )
    if problems:
        return Verdict(
            "steps go forward",
            FAIL,
            f"{len(problems)} runs have steps going backwards with no restart marker (resume without purge)",
            problems[:MAX_LISTED],
            "a restart must write SessionLog.START at the resume step (TensorBoardMonitor does; tensorboardX: "
            "SummaryWriter(purge_step=N)); otherwise write the restarted training into a new run folder",
        )
    return Verdict("steps go forward", OK, "no tag's steps go backwards without a restart marker")


# -- paths ---------------------------------------------------------------------------------------


def check_ascii_paths(logdir: Path, runs: list[RunScan]) -> Verdict:
    paths = [logdir] + [scan.path for run in runs for scan in run.files]
    odd = [str(p) for p in paths if not str(p).isascii()]
    if odd:
        return Verdict(
            "ASCII paths",
            WARN,
            f"{len(odd)} paths contain non-ASCII characters",
            odd[:MAX_LISTED],
            "they work with a UTF-8 locale; under LANG=C, in some shells, URLs and MindSpore's file APIs they "
            "break: rename the folders to ASCII",
        )
    return Verdict("ASCII paths", OK, "all paths are ASCII")


# -- size --------------------------------------------------------------------------------------


def check_size(logdir: Path, runs: list[RunScan], max_gb: float, max_points: int, max_runs: int) -> Verdict:
    total = sum(scan.size for run in runs for scan in run.files)
    heavy = []
    for run in runs:
        for tag, count in run.points.items():
            if count > max_points:
                heavy.append(f"{_rel(run.path, logdir)} {tag}: {count:,} points")
    problems = heavy[:MAX_LISTED]
    if total > max_gb * 1024**3:
        problems.insert(0, f"event files total {total / 1024**3:.2f} GB (over {max_gb:g} GB)")
    if len(runs) > max_runs:
        problems.insert(0, f"{len(runs)} runs (over {max_runs})")
    summary = f"{total / 1024**2:.1f} MB in {len(runs)} runs"
    if problems:
        return Verdict(
            "logdir size",
            WARN,
            f"{summary}: TensorBoard will load slowly",
            problems,
            "point TensorBoard at one experiment's folder instead of the whole tree, move old runs away, or "
            f"log less often (log_every); tags over {max_points:,} points are heavy with --all_points",
        )
    return Verdict("logdir size", OK, summary)


# -- server --------------------------------------------------------------------------------------


def _same_or_parent(served: str, logdir: Path) -> bool:
    served_path = Path(served).expanduser().resolve()
    return logdir == served_path or served_path in logdir.parents


def check_server(logdir: Path, port: int, runs: list[RunScan], port_given: bool, view: Path | None) -> Verdict:
    """The TensorBoard on ``port``. Without ``port_given``, ``port`` is only the default: a TensorBoard
    serving ``logdir`` on another port (``mftb tensorboard`` moves on when the port is taken) is checked
    instead, and none at all is information, since the event files do not need one. Fixes start
    TensorBoard on ``view``: LOGDIR, or where its runs were found instead."""
    facts = tensorboard_server.probe(port)
    if not port_given and not (facts and facts.logdir and _same_or_parent(facts.logdir, logdir)):
        elsewhere = _serving_elsewhere(logdir, port)
        if elsewhere is None:
            return _not_running(logdir, port, facts, view)
        port, facts = elsewhere.port, elsewhere
    name = f"TensorBoard on port {port}"
    if facts is None:
        others = _servers_for(logdir)
        details = [f"TensorBoard serving it: http://{tensorboard_server.LOOPBACK}:{p}/" for p in others]
        listening = not tensorboard_server.port_is_free(port)
        summary = tensorboard_server.who_listens(port) if listening else f"nothing listens on {port}"
        return Verdict(name, FAIL, summary, details, _view_command(view, f" --port {port}"))
    if not facts.logdir or not _same_or_parent(facts.logdir, logdir):
        return Verdict(
            name,
            FAIL,
            f"it serves {facts.logdir or 'an unknown logdir'}, not {logdir}",
            [],
            _view_command(view, " (it picks a free port)"),
        )
    misconfigured = _flag_problems(facts.flags, runs)
    if misconfigured:
        status, summary, fix = misconfigured
        return Verdict(name, status, f"serves {facts.logdir}, but {summary}", [], fix)
    served_root = Path(facts.logdir).expanduser().resolve()
    expected = {_rel(run.path, served_root) for run in runs}
    missing = sorted(expected - set(facts.runs))
    if missing:
        return Verdict(
            name,
            WARN,
            f"serves {facts.logdir} but does not list {len(missing)} of its runs yet",
            missing[:MAX_LISTED],
            "TensorBoard rescans every 5 s; if they stay missing, restart it with mftb tensorboard "
            "(which passes --reload_multifile=true)",
        )
    return Verdict(name, OK, f"serves {facts.logdir} with {len(facts.runs)} runs (TensorBoard {facts.version})")


def _serving_elsewhere(logdir: Path, port: int) -> tensorboard_server.ServerFacts | None:
    """A local TensorBoard that answers on a port other than ``port`` and serves ``logdir``."""
    for other in _servers_for(logdir):
        facts = tensorboard_server.probe(other) if other != port else None
        if facts and facts.logdir and _same_or_parent(facts.logdir, logdir):
            return facts
    return None


def _not_running(logdir: Path, port: int, facts: tensorboard_server.ServerFacts | None, view: Path | None) -> Verdict:
    if facts is not None:
        there = f"port {port} serves {facts.logdir or 'another logdir'}"
    elif not tensorboard_server.port_is_free(port):
        there = tensorboard_server.who_listens(port)
    else:
        there = f"nothing listens on {port}"
    return Verdict(
        "TensorBoard",
        INFO,
        f"none serves {logdir} ({there}); the checks above do not need one",
        [],
        f"to view the runs: {_view_command(view)}" if view else _view_command(view),
    )


def _flag_problems(flags: dict, runs: list[RunScan]) -> tuple[str, str, str] | None:
    """Server flags that hide data: (status, what goes wrong, fix), or None."""
    restart = "restart it with mftb tensorboard (add --all_points to keep every point)"
    if (flags.get("samples_per_plugin") or {}).get("scalars") == 0:
        # TensorBoard's scalars plugin downsamples each series to this many points: 0 means none.
        return FAIL, "it runs with --samples_per_plugin scalars=0, so every scalar chart is empty", restart
    if flags.get("reload_multifile") is False and any(len(run.files) > 1 for run in runs):
        return (
            WARN,
            "runs have several event files and it runs without --reload_multifile=true: only the newest "
            "file of each run gets new points",
            restart,
        )
    return None


def _servers_for(logdir: Path) -> list[int]:
    """Ports of TensorBoards on this machine that registered themselves as serving ``logdir``."""
    from tensorboard import manager

    try:
        infos = manager.get_all()
    except OSError:
        return []
    return [info.port for info in infos if info.logdir and _same_or_parent(info.logdir, logdir)]


def run_checks(
    logdir: Path,
    given: str,
    port: int,
    max_gb: float = 1.0,
    max_points: int = 100_000,
    max_runs: int = 300,
    port_given: bool = True,
) -> list[Verdict]:
    runs = scan_logdir(logdir) if logdir.is_dir() else []
    roots = [] if runs else search_roots(logdir, given)
    found, view = find_runs_elsewhere(roots)
    verdicts = [check_event_files(logdir, runs, roots, found, view)]
    if runs:
        verdicts += [
            check_complete_files(logdir, runs),
            check_single_writer(logdir, runs),
            check_steps_forward(logdir, runs),
            check_ascii_paths(logdir, runs),
            check_size(logdir, runs, max_gb, max_points, max_runs),
        ]
    verdicts.append(check_server(logdir, port, runs, port_given, logdir if runs else view))
    return verdicts
