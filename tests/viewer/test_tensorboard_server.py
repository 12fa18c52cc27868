"""`mftb tensorboard`: the real TensorBoard, started as a child process and queried over HTTP."""

from __future__ import annotations

import shlex
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import MFTB, subprocess_env
from tb_helpers import listening_addresses, mftb_tensorboard, wait_for

from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import tensorboard_server

pytestmark = pytest.mark.process


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    writer = RunWriter(tmp_path / "tb" / "llama_tiny_20261129-120000")
    writer.add_session_start(1)
    for step in range(1, 2001):
        writer.add_scalars(step, {"train/loss": 1.0 / step})
    writer.close()
    return tmp_path / "tb"


def scalars(port: int) -> list:
    return tensorboard_server.get_json(
        port, "/data/plugin/scalars/scalars?run=llama_tiny_20261129-120000&tag=train/loss"
    )


def test_serves_the_logdir_on_loopback_only_with_every_point(logdir: Path) -> None:
    port = tensorboard_server.free_port(18006)
    with mftb_tensorboard(logdir, "--port", str(port), "--all_points") as server:
        assert server.port == port
        assert f"TensorBoard is ready: http://127.0.0.1:{port}/  (Ctrl-C stops it)" in server.output  # no token
        assert listening_addresses(port) == {"127.0.0.1"}
        assert wait_for(lambda: tensorboard_server.get_json(port, "/data/runs")) == ["llama_tiny_20261129-120000"]
        flags = tensorboard_server.get_json(port, "/data/environment")["debug"]["flags"]
        assert flags["logdir"] == str(logdir) and flags["reload_multifile"] is True
        assert len(wait_for(lambda: scalars(port))) == 2000  # without --all_points TensorBoard keeps a sample of 1,000
        assert server.stop() == 0
    assert "TensorBoard stopped." in server.output
    assert tensorboard_server.port_is_free(port)


def test_reload_interval_reaches_tensorboard(logdir: Path) -> None:
    port = tensorboard_server.free_port(18106)
    with mftb_tensorboard(logdir, "--port", str(port), "--reload_interval", "60") as server:
        flags = wait_for(lambda: tensorboard_server.get_json(port, "/data/environment"))["debug"]["flags"]
        assert flags["reload_interval"] == 60.0
        assert server.stop() == 0


def test_ctrl_c_stops_the_server_and_exits_cleanly(logdir: Path) -> None:
    with mftb_tensorboard(logdir, "--port", str(tensorboard_server.free_port(18406))) as server:
        assert server.stop(signal.SIGINT) == 0
    assert "TensorBoard stopped." in server.output and "Traceback" not in server.output
    assert tensorboard_server.port_is_free(server.port)


def test_relative_logdir_is_made_absolute_and_a_taken_port_is_skipped(logdir: Path) -> None:
    taken = tensorboard_server.free_port(18106)
    with socket.socket() as blocker:
        blocker.bind((tensorboard_server.LOOPBACK, taken))
        blocker.listen()
        process_cwd = logdir.parent
        with mftb_tensorboard(Path("tb"), "--port", str(taken), cwd=process_cwd) as server:
            assert f"Port {taken} is taken; using {server.port}." in server.output
            assert server.port != taken
            assert tensorboard_server.probe(server.port).logdir == str(logdir)
            assert len(wait_for(lambda: scalars(server.port))) == 1000  # the default sampling, kept unless --all_points


def test_bind_all_without_a_token_warns_that_every_log_is_exposed(logdir: Path) -> None:
    """--auth none: the opt-out (with a token, the default: tests/viewer/test_protected_server.py)."""
    port = tensorboard_server.free_port(18206)
    ssh_session = {"SSH_CONNECTION": "203.0.113.7 52144 10.20.30.40 22"}
    with mftb_tensorboard(logdir, "--port", str(port), "--bind_all", "--auth", "none", env=ssh_session) as server:
        assert "WARNING: --bind_all --auth none" in server.output and "can read every log under" in server.output
        assert listening_addresses(port) & {"0.0.0.0", "::"}
        assert wait_for(lambda: tensorboard_server.get_json(port, "/data/runs")) == ["llama_tiny_20261129-120000"]
    assert "ssh -N" not in server.output  # reachable without a tunnel


def test_in_an_ssh_session_the_tunnel_command_for_the_url_is_printed(logdir: Path) -> None:
    """SSH_CONNECTION is "client_ip client_port server_ip server_port": the tunnel goes to the server
    address the session came in on, with its port and the login name."""
    port = tensorboard_server.free_port(18506)
    ssh_session = {"SSH_CONNECTION": "203.0.113.7 52144 10.20.30.40 2222", "USER": "alice", "LOGNAME": "alice"}
    with mftb_tensorboard(logdir, "--port", str(port), env=ssh_session) as server:
        assert listening_addresses(port) == {"127.0.0.1"}
    tunnel = f"ssh -N -L {port}:127.0.0.1:{port} -p 2222 alice@10.20.30.40"
    assert f"TensorBoard is ready: http://127.0.0.1:{port}/  (Ctrl-C stops it)\n" in server.output
    assert f"From the computer you SSH from, run this, then open the URL there: {tunnel}\n" in server.output
    if shutil.which("ssh"):  # what the ssh client makes of that command, without connecting (-G)
        argv = shlex.split(tunnel)
        resolved = subprocess.run(
            ["ssh", "-G", "-F", "/dev/null", *argv[1:]], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        expected = {"user alice", "hostname 10.20.30.40", "port 2222", f"localforward {port} [127.0.0.1]:{port}"}
        assert expected <= set(resolved), resolved
    standard = {"SSH_CONNECTION": "203.0.113.7 52144 10.20.30.40 22", "USER": "alice"}
    assert tensorboard_server.ssh_tunnel_command(6006, standard) == "ssh -N -L 6006:127.0.0.1:6006 alice@10.20.30.40"
    assert tensorboard_server.ssh_tunnel_command(6006, {}) is None  # not in an SSH session
    assert tensorboard_server.ssh_tunnel_command(6006, {"SSH_CONNECTION": ""}) is None


def test_a_reload_interval_that_is_not_positive_is_a_usage_error(logdir: Path) -> None:
    command = [MFTB, "tensorboard", str(logdir), "--reload_interval", "0"]
    result = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 2
    assert "--reload_interval must be a number of seconds above 0, got 0" in result.stderr


def test_a_missing_logdir_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [MFTB, "tensorboard", str(tmp_path / "nope")], env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == 2
    assert f"LOGDIR {tmp_path / 'nope'} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
