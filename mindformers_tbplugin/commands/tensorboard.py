"""``mftb tensorboard``: start the real TensorBoard on a logdir, safely bound and ready when it says so."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from mindformers_tbplugin.viewer.access_token import TOKEN_ENV  # cheap: standard library only

NAME = "tensorboard"
HELP = "start TensorBoard on LOGDIR (127.0.0.1, a free port, every run file reloaded)"
DESCRIPTION = (
    "Start the installed TensorBoard on LOGDIR made absolute, bound to 127.0.0.1 unless --bind_all, with "
    "--reload_multifile=true so runs with several event files update live. If --port is taken, the next "
    "free port is used. Prints the URL once the server answers, and in an SSH session the ssh -L command that "
    "opens it from the computer you connect from; Ctrl-C or SIGTERM stops it. With --bind_all every request "
    "needs an access token (generated and printed in the URL, or given with --token_file, --token or "
    f"{TOKEN_ENV}) unless --auth none; --certfile serves HTTPS."
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
    parser.add_argument(
        "--auth",
        choices=("token", "none"),
        help="token: every request needs the access token (the default with --bind_all or a token given); "
        "none: no token (the default on 127.0.0.1)",
    )
    parser.add_argument(
        "--token_file",
        type=Path,
        metavar="FILE",
        help=f"read the access token from FILE (else --token, else ${TOKEN_ENV}, else a new one is generated)",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="the access token (at least 16 of A-Z a-z 0-9 - . _ ~; other users can see it in `ps`: "
        f"prefer --token_file or ${TOKEN_ENV})",
    )
    parser.add_argument("--certfile", type=Path, metavar="FILE", help="serve HTTPS with this PEM certificate (chain)")
    parser.add_argument(
        "--keyfile", type=Path, metavar="FILE", help="the certificate's private key, when not in --certfile"
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

    token, token_source = _access_token(args)
    tls = args.certfile is not None
    if tls:
        _check_certificate(args.certfile, args.keyfile)
    elif args.keyfile is not None:
        raise UsageError("--keyfile needs --certfile (the certificate it belongs to)")

    bind_host = "" if args.bind_all else tensorboard_server.LOOPBACK
    port = tensorboard_server.free_port(args.port, bind_host)
    if port != args.port:
        print(f"Port {args.port} is taken; using {port}.", flush=True)
    if args.bind_all:
        _say_who_can_read(logdir, port, token is not None, tls)
    host = socket.gethostname() if args.bind_all else tensorboard_server.LOOPBACK
    url = f"{'https' if tls else 'http'}://{host}:{port}/"

    argv = tensorboard_server.tensorboard_argv(
        logdir, port, bind_all=args.bind_all, all_points=args.all_points, reload_interval=args.reload_interval
    )
    env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}
    if token is not None or tls:
        argv = tensorboard_server.protected_argv(argv, args.certfile, args.keyfile)
        if token is not None:
            env[TOKEN_ENV] = token  # the environment, not argv: other users see argv in `ps`
    # Own session: a terminal's Ctrl-C reaches only us, and we stop the server in order.
    process = subprocess.Popen(argv, start_new_session=True, env=env)
    stopping = False

    def forward(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if process.poll() is None:
            process.terminate()

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"Starting TensorBoard on {logdir} at {url}", flush=True)
        if not tensorboard_server.wait_until_serving(process, port, token=token, tls=tls):
            if stopping:
                return _stopped(process)
            code = process.poll()
            if code is None:
                tensorboard_server.stop(process)
                print("mftb tensorboard: error: TensorBoard did not answer within 120 s; stopped it.", file=sys.stderr)
            else:
                print(f"mftb tensorboard: error: TensorBoard exited with status {code}.", file=sys.stderr)
            return 1
        if token_source == "generated":  # the only place the token is ever printed: the URL the user needs
            print(f"TensorBoard is ready: {url}?token={token}  (Ctrl-C stops it)", flush=True)
        else:
            print(f"TensorBoard is ready: {url}  (Ctrl-C stops it)", flush=True)
        if token_source not in (None, "generated"):
            print(
                f"Access token from {token_source}: open {url}?token=<the token> once (the browser keeps it), "
                "or send the header 'Authorization: Bearer <the token>'.",
                flush=True,
            )
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


def _access_token(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The token every request must carry and where it came from; (None, None) without one."""
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.viewer import access_token

    given = args.token is not None or args.token_file is not None
    if args.auth == "none":
        if given:
            raise UsageError("--auth none asks for no token; drop --token/--token_file, or drop --auth none")
        return None, None
    if args.auth == "token" or args.bind_all or given:
        return access_token.resolve(args.token, args.token_file, dict(os.environ))
    return None, None


def _check_certificate(certfile: Path, keyfile: Path | None) -> None:
    """Load the certificate now: a bad one is a usage error here, not a server dying in the background."""
    import ssl

    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.viewer.protected_server import tls_context

    try:
        tls_context(str(certfile), None if keyfile is None else str(keyfile))
    except (OSError, ssl.SSLError) as error:
        key = "" if keyfile is None else f" with --keyfile {keyfile}"
        raise UsageError(
            f"--certfile {certfile}{key}: cannot load it ({error.__class__.__name__}: {error}); give a PEM "
            "certificate and its private key (in the same file or with --keyfile)"
        ) from None


def _say_who_can_read(logdir: Path, port: int, token: bool, tls: bool) -> None:
    if not token:
        print(
            "WARNING: --bind_all --auth none: TensorBoard listens on every network interface and asks no token; "
            f"anyone who can reach this machine on port {port} can read every log under {logdir}.",
            file=sys.stderr,
            flush=True,
        )
        return
    print("--bind_all: listening on every network interface; every request needs the access token.", flush=True)
    if not tls:
        print(
            "WARNING: without --certfile the token and the logs cross the network unencrypted.",
            file=sys.stderr,
            flush=True,
        )


def _stopped(process: subprocess.Popen) -> int:
    from mindformers_tbplugin.viewer import tensorboard_server

    tensorboard_server.stop(process)
    print("TensorBoard stopped.", flush=True)
    return 0
