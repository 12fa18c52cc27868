"""Group chat bots: Feishu/Lark and DingTalk custom bots (with their signed requests), WeCom group robots
and Slack-compatible incoming webhooks. Each posts its own documented JSON shape; docs/alerts.md cites the
pages. Feishu, DingTalk and WeCom answer HTTP 200 with a non-zero ``code``/``errcode`` when they refuse a
message (a wrong signature, a missing keyword, a rate limit): that counts as a failed delivery.
"""

from __future__ import annotations

import abc
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from mindformers_tbplugin.alerts.alert_text import Text, alert_text, summary_text
from mindformers_tbplugin.alerts.delivery import DeliveryError, MessageSink, Summary, secret
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.log import mask_url

TIMEOUT_S = 5.0
CLIP_BYTES = 4000  # under every bot's limit (WeCom's markdown: 4096 bytes)
SECRET_KEYS = ("secret_env", "secret_file")


def feishu_sign(timestamp: str, secret_value: str) -> str:
    """Feishu/Lark: HmacSHA256 keyed by ``timestamp + "\\n" + secret`` over nothing, base64."""
    key = f"{timestamp}\n{secret_value}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def dingtalk_sign(timestamp: str, secret_value: str) -> str:
    """DingTalk: HmacSHA256 keyed by the secret over ``timestamp + "\\n" + secret``, base64 (not yet
    URL-encoded: the query string encoding does that)."""
    digest = hmac.new(secret_value.encode(), f"{timestamp}\n{secret_value}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def clip(text: str, limit: int = CLIP_BYTES) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes (whole characters), marked when cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 4].decode(errors="ignore") + "\n..."


class ChatSink(MessageSink):
    """POSTs one JSON message per alert to a bot's URL (which holds its token: masked in every message)."""

    label = "chat"
    signed = False  # takes secret_env / secret_file

    def __init__(self, url: str, secret_value: str | None = None, tensorboard: str | None = None, **delivery: Any):
        super().__init__(**delivery)
        self.url = url
        self.shown = ""  # how the URL is named in messages when it comes from the environment
        self.secret = secret_value
        self.tensorboard = tensorboard
        self.timeout = TIMEOUT_S

    def describe(self) -> str:
        return f"{self.label} {self.shown or mask_url(self.url)}"

    def send(self, item: Alert | Summary) -> None:
        text = alert_text(item, self.tensorboard) if isinstance(item, Alert) else summary_text(item, self.tensorboard)
        url, payload = self.request(text)
        self.check(self._post(url, payload))

    @abc.abstractmethod
    def request(self, text: Text) -> tuple[str, dict[str, Any]]:
        """The URL to POST to and the JSON body, in the bot's own shape."""

    def check(self, answer: Any) -> None:
        """Raise DeliveryError when an HTTP 200 answer says the message was refused."""

    def _post(self, url: str, payload: dict[str, Any]) -> Any:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json; charset=utf-8"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            retry = exc.code >= 500 or exc.code == 429
            raise DeliveryError(f"HTTP {exc.code} {_snippet(exc.read())}".rstrip(), retry) from None
        except (OSError, http.client.HTTPException) as exc:  # refused, unreachable, timed out, cut off
            raise DeliveryError(f"unreachable: {getattr(exc, 'reason', exc)}", True) from None
        except ValueError as exc:  # its text may quote the URL, which holds the token
            raise DeliveryError(f"not sent: {type(exc).__name__}", False) from None
        try:
            return json.loads(text)
        except ValueError:
            return text  # Slack answers "ok"


def _snippet(data: bytes) -> str:
    return data[:200].decode("utf-8", errors="replace").replace("\n", " ")


def _refused(answer: Any, key: str, message_key: str, bot: str) -> None:
    if not isinstance(answer, Mapping):
        raise DeliveryError(f"{bot} answered {str(answer)[:200]!r}, not JSON", False)
    code = answer.get(key, 0)
    if code != 0:
        raise DeliveryError(f"{bot} answered {key} {code}: {answer.get(message_key, '')}", False)


class FeishuSink(ChatSink):
    """Feishu/Lark custom bot: ``msg_type: text``; signed: ``timestamp`` (seconds) and ``sign`` in the body."""

    label = "feishu"
    signed = True

    def request(self, text: Text) -> tuple[str, dict[str, Any]]:
        payload: dict[str, Any] = {"msg_type": "text", "content": {"text": clip(text.plain())}}
        if self.secret:
            timestamp = str(int(time.time()))
            payload.update(timestamp=timestamp, sign=feishu_sign(timestamp, self.secret))
        return self.url, payload

    def check(self, answer: Any) -> None:
        if isinstance(answer, Mapping) and "code" not in answer and "StatusCode" in answer:  # older answers
            _refused(answer, "StatusCode", "StatusMessage", "Feishu")
        else:
            _refused(answer, "code", "msg", "Feishu")


class DingTalkSink(ChatSink):
    """DingTalk custom robot: ``msgtype: text``; signed: ``timestamp`` (ms) and ``sign`` in the query."""

    label = "dingtalk"
    signed = True

    def request(self, text: Text) -> tuple[str, dict[str, Any]]:
        url = self.url
        if self.secret:
            timestamp = str(round(time.time() * 1000))
            query = urllib.parse.urlencode({"timestamp": timestamp, "sign": dingtalk_sign(timestamp, self.secret)})
            url = f"{url}{'&' if urllib.parse.urlsplit(url).query else '?'}{query}"
        return url, {"msgtype": "text", "text": {"content": clip(text.plain())}}

    def check(self, answer: Any) -> None:
        _refused(answer, "errcode", "errmsg", "DingTalk")


class WeComSink(ChatSink):
    """WeCom group robot: ``msgtype: markdown`` (the key is in the URL; no signature)."""

    label = "wecom"

    def request(self, text: Text) -> tuple[str, dict[str, Any]]:
        lines = [line.replace(f"TensorBoard: {text.link}", f"[TensorBoard]({text.link})") for line in text.lines]
        content = "\n".join((f"**{text.title}**", *lines))
        return self.url, {"msgtype": "markdown", "markdown": {"content": clip(content)}}

    def check(self, answer: Any) -> None:
        _refused(answer, "errcode", "errmsg", "WeCom")


class SlackSink(ChatSink):
    """Slack (and compatible: Mattermost, Rocket.Chat...) incoming webhook: ``{"text": ...}``; any status
    other than 2xx is a failure."""

    label = "slack"

    def request(self, text: Text) -> tuple[str, dict[str, Any]]:
        return self.url, {"text": clip(text.plain())}


CHAT_SINKS: dict[str, type[ChatSink]] = {cls.label: cls for cls in (FeishuSink, DingTalkSink, WeComSink, SlackSink)}


def build_chat(spec: Mapping[str, Any], kind: str, tensorboard: str | None) -> tuple[ChatSink | None, list]:
    """A chat sink from ``{kind: URL, secret_env: VAR}``, or the problems ``[(key, message)]``. The URL may be
    ``${VAR}``: read from that environment variable (MindFormers prints the whole config at train begin).
    An unset variable is no problem of the config: the sink says so at start (``unavailable``) and the
    others go on."""
    cls = CHAT_SINKS[kind]
    url, problems = spec[kind], []
    variable = re.fullmatch(r"\$\{(\w+)\}", url) if isinstance(url, str) else None
    if variable is not None:
        url = os.environ.get(variable.group(1), "")
        if url and urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            problems.append((kind, f"environment variable {variable.group(1)} holds no http:// or https:// URL"))
    elif not (isinstance(url, str) and urllib.parse.urlsplit(url).scheme in ("http", "https")):
        shown = repr(mask_url(url)) if isinstance(url, str) and "://" in url else repr(url)
        problems.append((kind, f"expected the bot's http:// or https:// URL or ${{VARIABLE}}, got {shown}"))
    allowed = SECRET_KEYS if cls.signed else ()
    for key in spec:
        if key != kind and key not in allowed:
            options = f"allowed: {', '.join(allowed)}" if allowed else f"a {kind} sink takes only its URL"
            problems.append((key, f"unknown option of the {kind} sink ({options})"))
        elif key != kind and not (isinstance(spec[key], str) and spec[key].strip()):
            problems.append((key, f"expected an environment variable name or a file path, got {spec[key]!r}"))
    if all(key in spec for key in SECRET_KEYS):
        problems.append(("secret_file", "give secret_env or secret_file, not both"))
    if problems:
        return None, problems
    value, why = secret(spec.get("secret_env"), spec.get("secret_file"))
    sink = cls(url, value, tensorboard)
    if variable is not None:
        sink.shown = variable.group(0)
        if not url:
            why = f"environment variable {variable.group(1)} (the bot's URL) is not set"
    sink.unavailable = why
    return sink, []
