"""``mftb runs``: every run under a root, one line each, from the runs' status records."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

NAME = "runs"
HELP = "one line per run under ROOT: who, where, state, progress, loss, throughput, alerts"
DESCRIPTION = (
    "List every run under ROOT (searched at any depth): experiment and run, owner, hosts and world size, start "
    "time and duration, state (starting, running, stale, failed, stopped by alert, finished; unknown or unreadable "
    "for a folder that does not say), last step of total, last loss, tokens per second per device, MFU, alerts fired "
    "and the last incident's step. Read from each run's status record (mftb_status.json); a run without one (an "
    "older release, an imported folder) from its event files' names, times and last 16 KiB. Exit status: 0 "
    "(also when no run is found), 2 for a wrong option or a ROOT that is not a folder."
)
DEFAULT_WATCH_SECS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mindformers_tbplugin.pipeline.status_record import DEFAULT_STALE_AFTER_SECS
    from mindformers_tbplugin.viewer.runs_table import SORT_KEYS, STATES

    parser.add_argument("root", metavar="ROOT", help="a folder holding runs (a log_dir, or a folder of many)")
    parser.add_argument(
        "--status",
        action="append",
        metavar="STATE[,STATE]",
        help=f"only runs in these states (repeatable; {', '.join(STATES)}; spaces may be - or _)",
    )
    parser.add_argument(
        "--since", metavar="WHEN", help="only runs started since: 30m, 2h, 7d, 1w ago, or 2026-12-07[T09:30]"
    )
    parser.add_argument("--experiment", metavar="GLOB", help="only runs of experiments matching this name or glob")
    parser.add_argument(
        "--sort",
        choices=sorted(SORT_KEYS),
        default="start",
        help="order (default start): newest, furthest, fastest, most alerts first; loss lowest first",
    )
    parser.add_argument("--reverse", action="store_true", help="the other way round")
    parser.add_argument(
        "--stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER_SECS,
        metavar="SECONDS",
        help=f"a running run with no record written, or no new step, for this long is stale (default "
        f"{DEFAULT_STALE_AFTER_SECS:.0f})",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects instead of the table")
    parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=DEFAULT_WATCH_SECS,
        metavar="SECONDS",
        help=f"redraw every SECONDS (default {DEFAULT_WATCH_SECS:.0f}) until Ctrl-C",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.viewer import runs_table

    root = Path(args.root).expanduser()
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder (give the folder the runs are under)")
    if args.stale_after <= 0:
        raise UsageError(f"--stale-after must be a positive number of seconds, got {args.stale_after:g}")
    if args.watch is not None and args.watch <= 0:
        raise UsageError(f"--watch must be a positive number of seconds, got {args.watch:g}")
    try:
        states = {runs_table.normal_state(s) for given in args.status or () for s in given.split(",") if s.strip()}
        since = runs_table.parse_since(args.since, time.time()) if args.since else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.watch is None:
        _print_once(root, args, states, since)
        return 0
    try:
        while True:
            sys.stdout.write("\x1b[H\x1b[2J")  # home, clear the screen
            _print_once(root, args, states, since)
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _print_once(root: Path, args: argparse.Namespace, states: set[str], since: float | None) -> None:
    from mindformers_tbplugin.viewer import runs_table, runs_text

    began = time.perf_counter()
    rows = runs_table.list_runs(root, args.stale_after)
    shown = runs_table.select(rows, states, since, args.experiment)
    shown = runs_table.sort_rows(shown, args.sort, args.reverse)
    if args.json:
        print(json.dumps([row.as_json() for row in shown], separators=(",", ":"), allow_nan=False))
        return
    print("\n".join(runs_text.table(shown)))
    print(runs_text.summary(rows, len(shown), str(root), time.perf_counter() - began))
