"""Where alerts go: a log line, TensorBoard, a JSONL file, a command, a webhook, a chat bot, e-mail.

Configured as a YAML-style list: ``[log, tensorboard, {jsonl: path}, {command: [argv...]},
{webhook: url}, {feishu: url, secret_env: VAR}, {dingtalk: ...}, {wecom: url}, {slack: url},
{email: {...}}]`` (the chat and mail sinks: alerts/chat_sinks.py, alerts/mail_sink.py). ``log`` and
``tensorboard`` run on the caller's thread (both only hand data to queues). The others each get a
background thread with a bounded queue, so a slow disk, command or server never blocks training;
their failures are logged once per kind of failure.
"""

from __future__ import annotations

import abc
import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mindformers_tbplugin.alerts.chat_sinks import CHAT_SINKS, build_chat
from mindformers_tbplugin.alerts.delivery import Sink
from mindformers_tbplugin.alerts.mail_sink import build_email
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.log import WarnOnce, logger, mask_url
from mindformers_tbplugin.schema import ConfigError, Problem

SINK_NAMES = ("log", "tensorboard", "jsonl", "command", "webhook", *CHAT_SINKS, "email")
PLACEHOLDERS = ("rule", "message", "tag", "step", "value", "severity", "run")
WEBHOOK_TIMEOUT_S = 5.0
QUEUE_LIMIT = 1000  # alerts held per background sink; beyond it the oldest are dropped


def format_alert(alert: Alert) -> str:
    run = f" run={alert.run}" if alert.run else ""
    return f"ALERT [{alert.severity}] {alert.rule}{run} tag={alert.tag} step={alert.step}: {alert.message}"


class LogSink(Sink):
    label = "log"

    def emit(self, alert: Alert) -> None:
        logger.warning(format_alert(alert))


class TensorBoardSink(Sink):
    """``alerts/<rule>`` = 1 at the alert's step, and the message under ``alerts/messages`` (Text tab)."""

    label = "tensorboard"

    def emit(self, alert: Alert) -> None:
        from mindformers_tbplugin.pipeline.custom_metrics import log_scalars, log_text

        log_scalars({f"alerts/{alert.rule}": 1.0}, step=alert.step, kind="model")
        log_text("alerts/messages", f"[{alert.severity}] {alert.rule} {alert.tag}: {alert.message}", step=alert.step)
        if alert.incident is not None:
            from mindformers_tbplugin.alerts.incident import INCIDENT_TAG, markdown

            log_text(INCIDENT_TAG, markdown(alert), step=alert.step)


class BackgroundSink(Sink):
    """Delivers alerts on its own daemon thread, started at the first alert."""

    def __init__(self) -> None:
        self._queue: deque[Alert | None] = deque(maxlen=QUEUE_LIMIT)
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self.warn_once = WarnOnce(note=" (further failures of this kind are not reported)")

    def emit(self, alert: Alert) -> None:
        with self._wake:
            self._queue.append(alert)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"mftb-alerts-{self.label}", daemon=True)
                self._thread.start()
            self._wake.notify()

    def close(self, timeout: float = 5.0) -> None:
        with self._wake:
            if self._thread is None:
                return
            self._queue.append(None)
            self._wake.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                alert = self._queue.popleft()
            if alert is None:
                self.finish()
                return
            try:
                self.deliver(alert)
            except Exception as exc:  # a sink must never take anything else down
                self.warn_once(type(exc).__name__, f"alert {self.label} sink failed: {exc!r}")

    @abc.abstractmethod
    def deliver(self, alert: Alert) -> None: ...

    def finish(self) -> None:
        """Called on the sink's thread after the last alert."""


class JsonlSink(BackgroundSink):
    label = "jsonl"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = Path(path).expanduser().absolute()

    def describe(self) -> str:
        return f"jsonl {self.path}"

    def deliver(self, alert: Alert) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(alert.as_dict(), ensure_ascii=False) + "\n")
        except OSError as exc:
            self.warn_once("os", f"cannot append alerts to {self.path}: {exc}")


class CommandSink(BackgroundSink):
    """Starts ``argv`` with placeholders filled per argument; never through a shell, never waited for."""

    label = "command"

    def __init__(self, argv: Sequence[str]) -> None:
        super().__init__()
        self.argv = list(argv)
        self._children: list[subprocess.Popen] = []

    def describe(self) -> str:
        return f"command {self.argv[0]}"

    def fill(self, alert: Alert) -> list[str]:
        fields = {name: str(getattr(alert, name)) for name in PLACEHOLDERS}
        return [_fill(arg, fields) for arg in self.argv]

    def deliver(self, alert: Alert) -> None:
        self._children = [child for child in self._children if child.poll() is None]  # reap finished ones
        try:
            child = subprocess.Popen(
                self.fill(alert),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to training does not reach the pager script
            )
        except OSError as exc:
            # The program name only: later arguments may carry secrets.
            self.warn_once("start", f"cannot run alert command {self.argv[0]!r}: {exc.strerror or exc}")
            return
        self._children.append(child)

    def finish(self) -> None:
        for child in self._children:
            try:
                child.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.warn_once("slow", f"alert command {self.argv[0]!r} still runs; not waiting for it")


def _fill(template: str, fields: dict[str, str]) -> str:
    """Replace ``{name}`` placeholders; other braces stay as they are (no str.format on user text)."""
    for name, value in fields.items():
        template = template.replace("{" + name + "}", value)
    return template


class WebhookSink(BackgroundSink):
    """POSTs each alert as JSON to ``url`` with a short timeout."""

    label = "webhook"

    def __init__(self, url: str, timeout: float = WEBHOOK_TIMEOUT_S) -> None:
        super().__init__()
        self.url = url
        self.timeout = timeout

    def describe(self) -> str:
        return f"webhook {mask_url(self.url)}"

    def deliver(self, alert: Alert) -> None:
        body = json.dumps(alert.as_dict(), ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            self.warn_once(f"http{exc.code}", f"alert webhook {mask_url(self.url)} answered HTTP {exc.code}")
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            self.warn_once("net", f"alert webhook {mask_url(self.url)} unreachable: {reason}")


def build_sinks(specs: Any, where: str = "sinks", tensorboard: str | None = None) -> tuple[list[Sink], list[Problem]]:
    """Sinks from ``[log, tensorboard, {jsonl: path}, {command: [argv...]}, {webhook: url}, {slack: url}, ...]``.

    ``tensorboard``: the team's TensorBoard URL, for the chat and mail messages' link to the run."""
    if not isinstance(specs, (list, tuple)):
        return [], [Problem(where, f"expected a list like [log, {{jsonl: alerts.jsonl}}], got {specs!r}")]
    sinks: list[Sink] = []
    problems: list[Problem] = []
    allowed = ", ".join(SINK_NAMES)
    for index, spec in enumerate(specs):
        key = f"{where}[{index}]"
        chat = [kind for kind in spec if kind in CHAT_SINKS] if isinstance(spec, dict) else []
        if spec == "log":
            sinks.append(LogSink())
        elif spec == "tensorboard":
            sinks.append(TensorBoardSink())
        elif len(chat) == 1 or (isinstance(spec, dict) and len(spec) == 1 and "email" in spec):
            sink, found = build_chat(spec, chat[0], tensorboard) if chat else build_email(spec["email"], tensorboard)
            problems += [Problem(f"{key}.{sub}", message) for sub, message in found]
            sinks += [sink] if sink is not None else []
        elif isinstance(spec, dict) and len(spec) == 1:
            ((kind, value),) = spec.items()
            sink, reason = _build_keyed(kind, value)
            if sink is None:
                problems.append(Problem(f"{key}.{kind}", reason))
            else:
                sinks.append(sink)
        else:
            problems.append(
                Problem(key, f"expected log, tensorboard or a mapping naming one sink ({allowed}), got {_shown(spec)}")
            )
    return sinks, problems


def unavailable_sinks(specs: Any, where: str = "sinks") -> list[Problem]:
    """The sinks that cannot deliver here (a secret variable unset, a secret file unreadable): said by
    ``mftb validate`` and at start; the other sinks carry on."""
    found = []
    for index, spec in enumerate(specs if isinstance(specs, (list, tuple)) else ()):
        built, _ = build_sinks([spec], where)
        found += [Problem(f"{where}[{index}]", _unavailable(sink)) for sink in built if sink.unavailable]
    return found


def _unavailable(sink: Sink) -> str:
    return f"alert sink {sink.describe()} is off: {sink.unavailable}; the other sinks carry on"


def usable_sinks(sinks: Sequence[Sink]) -> list[Sink]:
    """``sinks`` without those that cannot deliver, each said once in the log."""
    for sink in sinks:
        if sink.unavailable:
            logger.warning(_unavailable(sink))
    return [sink for sink in sinks if not sink.unavailable]


def _build_keyed(kind: Any, value: Any) -> tuple[Sink | None, str]:
    if kind == "jsonl":
        if isinstance(value, (str, os.PathLike)) and str(value):
            return JsonlSink(str(value)), ""
        return None, f"expected a file path, got {value!r}"
    if kind == "command":
        if isinstance(value, list) and value and all(isinstance(arg, (str, int, float)) for arg in value):
            program = str(value[0])
            if shutil.which(program) is None:
                return None, f"program {program!r} not found{_looked_up(program)} or not executable"
            return CommandSink([str(arg) for arg in value]), ""
        return None, "expected a non-empty list of arguments, e.g. [./page.sh, '{rule}', '{message}'] (no shell)"
    if kind == "webhook":
        if isinstance(value, str) and urllib.parse.urlsplit(value).scheme in ("http", "https"):
            return WebhookSink(value), ""
        return None, f"expected an http:// or https:// URL, got {_shown(value)}"
    allowed = ", ".join(SINK_NAMES)
    return None, f"unknown sink {kind!r} (allowed: {allowed})"


def _looked_up(program: str) -> str:
    """Where a command's program was looked for, as a message says it."""
    if os.sep not in program:
        return " on PATH"
    return "" if os.path.isabs(program) else " in the working directory"


def _shown(value: Any) -> str:
    """A config value for an error message, with URLs masked."""
    if isinstance(value, str) and "://" in value:
        return repr(mask_url(value))
    return repr(value)


def parse_sinks(specs: Any, where: str = "sinks", owner: str = "alerts", tensorboard: str | None = None) -> list[Sink]:
    sinks, problems = build_sinks(specs, where, tensorboard)
    if problems:
        raise ConfigError.for_owner(owner, problems)
    return sinks


class Dispatcher:
    """Hands each alert to every sink; a failing sink is reported once and skipped."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)
        self._warn_once = WarnOnce()

    def dispatch(self, alert: Alert) -> None:
        for sink in self.sinks:
            try:
                sink.emit(alert)
            except Exception as exc:  # alerting must never stop training or the watcher
                self._warn_once(str(id(sink)), f"alert sink {type(sink).__name__} failed: {exc!r}")

    def close(self, timeout: float = 5.0) -> None:
        for sink in self.sinks:
            sink.close(timeout)
