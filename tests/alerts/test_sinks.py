"""Alert sinks against real endpoints: a local HTTP server, a real subprocess, a real file."""

from __future__ import annotations

import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.sinks import (
    CommandSink,
    Dispatcher,
    JsonlSink,
    WebhookSink,
    build_sinks,
    mask_url,
    parse_sinks,
)
from mindformers_tbplugin.schema import ConfigError

ALERT = Alert("spike", "train/loss", 42, 9.5, 2.25, "train/loss spiked; rm -rf x && echo pwned", "warning")


class _Recorder(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server = self.server
        server.release.wait(10)  # holds the response until the test lets go
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server.received.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        del args


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def plugin_log():
    """Messages of the plugin's logger, wherever it is routed (MindFormers' logger or not)."""
    handler = _Collect()
    logger = logging.getLogger("mindformers_tbplugin")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


@pytest.fixture
def http_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.received, server.release = [], threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def test_webhook_posts_json_without_blocking_the_caller(http_server) -> None:
    url = f"http://127.0.0.1:{http_server.server_address[1]}/hook?token=SECRET123"
    sink = WebhookSink(url)
    sink.emit(ALERT)  # returns although the server has not answered yet
    assert http_server.received == []
    http_server.release.set()
    sink.close(timeout=10)
    assert http_server.received == [("/hook?token=SECRET123", "application/json", ALERT.as_dict())]


def test_unreachable_webhook_is_logged_once_with_the_secret_masked(plugin_log: list[str]) -> None:
    probe = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    port = probe.server_address[1]
    probe.server_close()  # nothing listens on this port any more
    sink = WebhookSink(f"http://user:pw@127.0.0.1:{port}/services/T0/B0/SECRET123", timeout=2)
    for _ in range(3):
        sink.emit(ALERT)
    sink.close(timeout=10)
    assert len(plugin_log) == 1, plugin_log
    assert f"alert webhook http://***@127.0.0.1:{port}/*** unreachable" in plugin_log[0]
    assert "SECRET123" not in plugin_log[0] and "user:pw" not in plugin_log[0]


def test_command_runs_the_argv_only_never_a_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "x"
    victim.mkdir()
    record = tmp_path / "argv.json"
    script = f"import json, sys; open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))"
    sink = CommandSink([sys.executable, "-c", script, "{rule}", "{message}", "{tag}@{step}={value}; rm -rf x", "{x}"])
    sink.emit(ALERT)
    sink.close(timeout=30)
    # A shell would have split on ';' and '&&', run 'rm -rf x' and 'echo pwned'.
    assert json.loads(record.read_text()) == [
        "spike",
        "train/loss spiked; rm -rf x && echo pwned",
        "train/loss@42=9.5; rm -rf x",
        "{x}",
    ]
    assert victim.is_dir()


def test_missing_command_is_reported_once_by_program_name(plugin_log: list[str]) -> None:
    sink = CommandSink(["/nonexistent/page-oncall", "--token=SECRET123"])
    sink.emit(ALERT)
    sink.emit(ALERT)
    sink.close(timeout=10)
    assert len(plugin_log) == 1 and "/nonexistent/page-oncall" in plugin_log[0], plugin_log
    assert "SECRET123" not in plugin_log[0]


def test_a_command_sink_whose_program_is_missing_is_a_config_error(tmp_path: Path) -> None:
    script = tmp_path / "page.sh"
    script.write_text("#!/bin/sh\n")
    _, problems = build_sinks([{"command": ["no-such-pager-xyz"]}, {"command": [str(script)]}])
    assert [p.render() for p in problems] == [
        "sinks[0].command: program 'no-such-pager-xyz' not found on PATH or not executable",
        f"sinks[1].command: program '{script}' not found or not executable",  # exists, not executable
    ]
    script.chmod(0o755)
    assert build_sinks([{"command": [str(script)]}])[1] == []


def test_jsonl_appends_one_object_per_alert(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "alerts.jsonl"
    sink = JsonlSink(str(path))
    nan_alert = Alert("nonfinite", "train/loss", 7, float("nan"), None, "train/loss is nan at step 7", "critical")
    Dispatcher([sink]).dispatch(ALERT)
    sink.emit(nan_alert)
    sink.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [ALERT.as_dict(), {**nan_alert.as_dict(), "value": "nan"}]


def test_sink_config_errors_are_listed_together() -> None:
    sinks, problems = build_sinks(["log", "tensorboard", {"jsonl": "a.jsonl"}, {"command": ["true"]}])
    assert [type(s).__name__ for s in sinks] == ["LogSink", "TensorBoardSink", "JsonlSink", "CommandSink"]
    assert problems == []
    with pytest.raises(ConfigError) as caught:
        parse_sinks(["slack", {"command": "echo {rule}"}, {"webhook": "ftp://u:p@h/TOKEN"}, {"email": "a@b"}])
    text = str(caught.value)
    assert "sinks[0]: expected log, tensorboard or a mapping naming one sink" in text
    assert "sinks[1].command: expected a non-empty list of arguments" in text
    assert "sinks[2].webhook: expected an http:// or https:// URL, got 'ftp://***@h/***'" in text
    assert "sinks[3].email: expected a mapping like {host: smtp.example.com" in text
    assert "TOKEN" not in text


def test_mask_url() -> None:
    assert mask_url("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com/***"
    assert mask_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert mask_url("http://a:b@host/?key=1") == "http://***@host/***"
