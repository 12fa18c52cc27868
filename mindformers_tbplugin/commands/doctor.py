"""``mftb doctor``: check a logdir and the TensorBoard serving it; a verdict and a fix per check."""

from __future__ import annotations

import argparse

NAME = "doctor"
HELP = "check LOGDIR's event files and the TensorBoard serving it, with a fix for each problem"
DESCRIPTION = (
    "Checks: event files present (else the runs found under the LOGDIR given: below a missing LOGDIR's nearest "
    "existing folder, or a relative LOGDIR taken from the 3 folders above the current one; with the command that shows "
    "them), files complete (not torn or still open), one writer per run folder, steps never going backwards "
    "without a restart marker, ASCII paths, logdir size, and a TensorBoard serving LOGDIR: on --port when given, "
    "else on 6006 or any local port; without --port, no TensorBoard is information, not a failure. Exit status "
    "0 when every check passes, 1 otherwise."
)
_MARKS = {"ok": "[ OK ]", "warn": "[WARN]", "fail": "[FAIL]", "info": "[INFO]"}
DEFAULT_PORT = 6006


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR", help="folder holding the run folders, e.g. ./output/tensorboard")
    parser.add_argument(
        "--port",
        type=int,
        help=f"port where TensorBoard must serve LOGDIR (default: look on {DEFAULT_PORT} and the ports of local "
        "TensorBoards, and only inform when none serves it)",
    )
    parser.add_argument(
        "--max_gb", type=float, default=1.0, help="event-file size above which loading is slow (default: 1.0)"
    )
    parser.add_argument(
        "--max_points_per_tag",
        type=int,
        default=100_000,
        help="scalar points per tag and run above which a tag is heavy (default: 100000)",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.tfevents.run_folders import absolute_path
    from mindformers_tbplugin.viewer.doctor import INFO, OK, run_checks

    port_given = args.port is not None
    port = args.port if port_given else DEFAULT_PORT
    if not 1 <= port <= 65535:
        raise UsageError(f"--port must be between 1 and 65535, got {args.port}")
    if args.max_gb <= 0 or args.max_points_per_tag < 1:
        raise UsageError("--max_gb and --max_points_per_tag must be positive")
    logdir = absolute_path(args.logdir).resolve()
    verdicts = run_checks(logdir, args.logdir, port, args.max_gb, args.max_points_per_tag, port_given=port_given)
    for verdict in verdicts:
        print(f"{_MARKS[verdict.status]} {verdict.check}: {verdict.summary}")
        for line in verdict.details:
            print(f"       {line}")
        if verdict.status == INFO and verdict.fix:
            print(f"       {verdict.fix}")
        elif verdict.status != OK and verdict.fix:
            print(f"       fix: {verdict.fix}")
    checks = [v for v in verdicts if v.status != INFO]
    failed = sum(v.status != OK for v in checks)
    print(f"{len(checks) - failed} of {len(checks)} checks passed.")
    return 0 if failed == 0 else 1
