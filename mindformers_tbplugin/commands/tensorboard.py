"""``mftb tensorboard``: start the real TensorBoard on a logdir, safely bound and ready when it says so."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys

NAME = "tensorboard"
HELP = "start TensorBoard on LOGDIR (127.0.0.1, a free port, every run file reloaded)"
DESCRIPTION = (
    "Start the installed TensorBoard on LOGDIR made absolute, bound to 127.0.0.1 unless --bind_all, with "
    "--reload_multifile=true so runs with several event files update live. If --port is taken, the next "
    "free port is used. Prints the URL once the server answers, and in an SSH session the ssh -L command that "
    "opens it from the computer you connect from; Ctrl-C or SIGTERM stops it."
)
DEFAULT_PORT = 6006


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR", help="folder holding the run folders, e.g. ./output/tensorboard")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to try first (default: %(default)s)")
    parser.add_argument(
        "--bind_all",
        action="store_true",
        help="listen on every network interface instead of 127.0.0.1 (exposes all logs to the network)",
    )
    parser.add_argument(
        "--reload_interval",
        type=float,
        metavar="SECONDS",
        help="how often TensorBoard reads new data from the logs (TensorBoard's default: 5)",
    )
    parser.add_argument(
        "--all_points",
        action="store_true",
        help="keep every scalar point (--samples_per_plugin scalars=1000000000) instead of 1,000 sampled per tag",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.tfevents.run_folders import absolute_path
    from mindformers_tbplugin.viewer import tensorboard_server

    logdir = absolute_path(args.logdir)
    if not logdir.exists():
        raise UsageError(f"LOGDIR {logdir} does not exist (given as {args.logdir!r}); run `mftb doctor` to find runs")
    if not logdir.is_dir():
        raise UsageError(f"LOGDIR {logdir} is not a folder; give the folder that holds the run folders")
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be between 1 and 65535, got {args.port}")
    if args.reload_interval is not None and not args.reload_interval > 0:
        raise UsageError(f"--reload_interval must be a number of seconds above 0, got {args.reload_interval:g}")

    bind_host = "" if args.bind_all else tensorboard_server.LOOPBACK
    port = tensorboard_server.free_port(args.port, bind_host)
    if port != args.port:
        print(f"Port {args.port} is taken; using {port}.", flush=True)
    if args.bind_all:
        print(
            "WARNING: --bind_all: TensorBoard listens on every network interface; anyone who can reach this "
            f"machine on port {port} can read every log under {logdir}.",
            file=sys.stderr,
            flush=True,
        )
    url = f"http://{socket.gethostname() if args.bind_all else tensorboard_server.LOOPBACK}:{port}/"

    argv = tensorboard_server.tensorboard_argv(
        logdir, port, bind_all=args.bind_all, all_points=args.all_points, reload_interval=args.reload_interval
    )
    # Own session: a terminal's Ctrl-C reaches only us, and we stop the server in order.
    process = subprocess.Popen(argv, start_new_session=True)
    stopping = False

    def forward(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if process.poll() is None:
            process.terminate()

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"Starting TensorBoard on {logdir} at {url}", flush=True)
        if not tensorboard_server.wait_until_serving(process, port):
            if stopping:
                return _stopped(process)
            code = process.poll()
            if code is None:
                tensorboard_server.stop(process)
                print("mftb tensorboard: error: TensorBoard did not answer within 120 s; stopped it.", file=sys.stderr)
            else:
                print(f"mftb tensorboard: error: TensorBoard exited with status {code}.", file=sys.stderr)
            return 1
        print(f"TensorBoard is ready: {url}  (Ctrl-C stops it)", flush=True)
        tunnel = None if args.bind_all else tensorboard_server.ssh_tunnel_command(port)
        if tunnel:  # in an SSH session: the loopback URL opens on the user's computer through a tunnel
            print(f"From the computer you SSH from, run this, then open the URL there: {tunnel}", flush=True)
        code = process.wait()
        return _stopped(process) if stopping else code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if process.poll() is None:
            tensorboard_server.stop(process)


def _stopped(process: subprocess.Popen) -> int:
    from mindformers_tbplugin.viewer import tensorboard_server

    tensorboard_server.stop(process)
    print("TensorBoard stopped.", flush=True)
    return 0
