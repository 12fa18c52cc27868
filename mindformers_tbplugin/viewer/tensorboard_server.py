"""Start, probe and stop the real TensorBoard server (shared by ``mftb tensorboard`` and ``mftb doctor``)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.viewer.access_token import REALM, TOKEN_ENV

LOOPBACK = "127.0.0.1"
PORT_SEARCH_SPAN = 100
KEEP_ALL_POINTS = 1_000_000_000  # reservoirs grow as points arrive: a huge bound costs no memory up front


def tensorboard_program() -> str:
    """The ``tensorboard`` script of this environment (beside our Python), else the one on PATH."""
    beside = Path(sys.executable).parent / "tensorboard"
    if beside.is_file():
        return str(beside)
    found = shutil.which("tensorboard")
    if found is None:
        raise UsageError("the 'tensorboard' program is not installed: pip install tensorboard")
    return found


def tensorboard_argv(
    logdir: Path, port: int, bind_all: bool = False, all_points: bool = False, reload_interval: float | None = None
) -> list[str]:
    argv = [tensorboard_program(), "--logdir", str(logdir), "--port", str(port), "--reload_multifile=true"]
    if reload_interval is not None:
        argv += ["--reload_interval", f"{reload_interval:g}"]
    argv += ["--bind_all"] if bind_all else ["--host", LOOPBACK]
    if all_points:
        # The default keeps 1,000 reservoir-sampled points per tag, which can hide loss spikes. "scalars=0" is
        # no way out: the scalars plugin then downsamples every series to zero points (TensorBoard 2.21).
        argv += ["--samples_per_plugin", f"scalars={KEEP_ALL_POINTS}"]
    return argv


def ssh_tunnel_command(port: int, environ: Mapping[str, str] | None = None) -> str | None:
    """The ``ssh -L`` command that makes ``http://127.0.0.1:port/`` of this machine open on the computer this
    SSH session comes from; None outside an SSH session (no ``SSH_CONNECTION``)."""
    environ = os.environ if environ is None else environ
    fields = environ.get("SSH_CONNECTION", "").split()
    if len(fields) != 4:  # "client_ip client_port server_ip server_port"
        return None
    server_ip, server_port = fields[2], fields[3]
    # The server address of this session, not socket.gethostname(): it is the address the user's ssh client
    # reached, so it works from there, while a cluster node's hostname often resolves only inside the cluster.
    user = environ.get("LOGNAME") or environ.get("USER") or _login_name()
    destination = f"{user}@{server_ip}" if user else server_ip
    ssh_port = "" if server_port == "22" else f" -p {server_port}"
    return f"ssh -N -L {port}:{LOOPBACK}:{port}{ssh_port} {destination}"


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name in the environment and no passwd entry
        return ""


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As TensorBoard's own server does: connections of a stopped server in TIME_WAIT leave the
        # port usable, while a listening socket still makes bind() fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(preferred: int, host: str = LOOPBACK) -> int:
    """``preferred`` if nothing listens there, else the next free one above it, else any free port."""
    for port in range(preferred, min(preferred + PORT_SEARCH_SPAN, 65536)):
        if port_is_free(port, host):
            return port
    return any_free_port(host)


def any_free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now, chosen by the kernel."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def protected_argv(tensorboard: list[str], certfile: Path | None = None, keyfile: Path | None = None) -> list[str]:
    """The command of TensorBoard behind the access token and/or TLS (viewer/protected_server.py), with the
    flags ``tensorboard_argv`` gives the ``tensorboard`` program; the token goes in the environment."""
    argv = [sys.executable, "-m", "mindformers_tbplugin.viewer.protected_server"]
    if certfile is not None:
        argv += ["--certfile", str(certfile)]
    if keyfile is not None:
        argv += ["--keyfile", str(keyfile)]
    return [*argv, "--", *tensorboard[1:]]


def get_json(port: int, path: str, timeout: float = 2.0, token: str | None = None, tls: bool = False) -> object | None:
    """GET ``http://127.0.0.1:port/path`` (``https`` with ``tls``, the token as a Bearer header) as JSON;
    None when nothing (or something else) answers."""
    request = urllib.request.Request(f"{'https' if tls else 'http'}://{LOOPBACK}:{port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    # Our own server on loopback: its certificate names the host users reach it by, not 127.0.0.1.
    context = ssl._create_unverified_context() if tls else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return json.loads(response.read().decode("utf-8"))
    except (OSError, ValueError, urllib.error.URLError):
        return None


@dataclass(frozen=True)
class ServerFacts:
    """What a TensorBoard server on a port says about itself."""

    port: int
    logdir: str | None
    runs: list[str]
    version: str | None
    flags: dict  # the server's command-line flags, when it reports them (its debug info); else empty


def probe(port: int, timeout: float = 2.0) -> ServerFacts | None:
    """Ask the server on ``port`` which logdir it serves and which runs it sees; None if no TensorBoard answers.
    A shared one (``mftb tensorboard --bind_all``) is asked with the token in the environment, over HTTPS
    when it does not answer HTTP."""
    token = os.environ.get(TOKEN_ENV) or None
    for tls in (False, True):
        environment = get_json(port, "/data/environment", timeout, token, tls)
        if isinstance(environment, dict):
            break
    else:
        return None
    logdir = environment.get("data_location")
    if not logdir:  # older servers
        legacy = get_json(port, "/data/logdir", timeout, token, tls)
        logdir = legacy.get("logdir") if isinstance(legacy, dict) else None
    runs = get_json(port, "/data/runs", timeout, token, tls)
    flags = (environment.get("debug") or {}).get("flags") or {}
    return ServerFacts(port, logdir, runs if isinstance(runs, list) else [], environment.get("version"), flags)


def who_listens(port: int, timeout: float = 2.0) -> str:
    """What listens on 127.0.0.1:``port`` when :func:`probe` found no TensorBoard there."""
    for tls in (False, True):
        request = urllib.request.Request(f"{'https' if tls else 'http'}://{LOOPBACK}:{port}/data/environment")
        try:
            urllib.request.urlopen(request, timeout=timeout, context=ssl._create_unverified_context() if tls else None)
        except urllib.error.HTTPError as error:
            if error.code == 401 and error.headers.get("WWW-Authenticate") == REALM:
                return f"a TensorBoard asking for its access token listens on {port} (set {TOKEN_ENV} to check it)"
        except OSError:
            continue
    return f"something else listens on 127.0.0.1:{port}"


def wait_until_serving(
    process: subprocess.Popen, port: int, timeout: float = 120.0, token: str | None = None, tls: bool = False
) -> bool:
    """Poll until the server answers over HTTP; False if it exited or the time ran out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if get_json(port, "/data/environment", timeout=1.0, token=token, tls=tls) is not None:
            return True
        time.sleep(0.2)
    return False


def stop(process: subprocess.Popen, grace: float = 10.0) -> int:
    """SIGTERM (TensorBoard then exits 0 after its exit handlers), SIGKILL after ``grace`` seconds."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
