"""Real servers on loopback that answer like the team's chat bots and mail server, for the sinks' tests.

Each ``BotServer`` checks the message shape its bot documents and recomputes the bot's signature itself
(from the bots' documentation, not from the package's code), then answers as the bot does: Feishu and
DingTalk with HTTP 200 and a non-zero ``code``/``errcode`` when they refuse a message, WeCom with
``errcode``, Slack with ``ok`` or HTTP 400 ``invalid_payload``. ``MailServer`` is aiosmtpd with a
self-signed certificate made by ``openssl`` for STARTTLS and SSL, and AUTH LOGIN/PLAIN.
"""

from __future__ import annotations

import base64
import email
import email.policy
import hashlib
import hmac
import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PATHS = {  # where each bot's URL points, with the token its real URL carries
    "feishu": "/open-apis/bot/v2/hook/HOOK-ID-SECRET",
    "dingtalk": "/robot/send?access_token=ACCESS-TOKEN-SECRET",
    "wecom": "/cgi-bin/webhook/send?key=WECOM-KEY-SECRET",
    "slack": "/services/T000/B000/SLACK-TOKEN-SECRET",
}
URL_TOKENS = ("HOOK-ID-SECRET", "ACCESS-TOKEN-SECRET", "WECOM-KEY-SECRET", "SLACK-TOKEN-SECRET")


def feishu_signature(timestamp: str, secret: str) -> str:
    """Feishu's documented scheme: HmacSHA256 with ``timestamp + "\\n" + secret`` as the key, over empty data."""
    return base64.b64encode(hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()).decode()


def dingtalk_signature(timestamp: str, secret: str) -> str:
    """DingTalk's: HmacSHA256 with the secret as key over ``timestamp + "\\n" + secret``, base64 (the query
    carries it URL-encoded)."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class BotServer:
    """One bot on 127.0.0.1. ``received``: the accepted messages' text; ``requests``: every request seen.
    ``fail_first``: answer that many requests with HTTP 503 first; ``hang``: never answer until closed."""

    def __init__(self, kind: str, secret: str | None = None, fail_first: int = 0, hang: bool = False) -> None:
        self.kind, self.secret, self.fail_first, self.hang = kind, secret, fail_first, hang
        self.received: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.changed = threading.Condition()
        self.release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{PATHS[self.kind]}"

    def wait(self, count: int, attr: str = "received", timeout: float = 60.0) -> None:
        """Until ``attr`` (received, or requests) has reached ``count``."""
        with self.changed:
            done = self.changed.wait_for(lambda: _size(getattr(self, attr)) >= count, timeout)
        assert done, f"{self.kind}: {attr} = {getattr(self, attr)!r}, waited for {count}"

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def answer(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        """(HTTP status, answer) as the real bot gives them; the message text is recorded when accepted."""
        now = time.time()
        if self.kind == "feishu":
            if self.secret is not None:
                stamp = body.get("timestamp", "0")
                if abs(now - int(stamp)) > 3600 or body.get("sign") != feishu_signature(stamp, self.secret):
                    refusal = "sign match fail or timestamp is not within one hour from current time"
                    return 200, {"code": 19021, "data": {}, "msg": refusal}
            if body.get("msg_type") != "text" or not isinstance(body.get("content", {}).get("text"), str):
                return 200, {"code": 9499, "data": {}, "msg": "Bad Request"}
            return self._accept(body["content"]["text"], {"code": 0, "data": {}, "msg": "success"})
        if self.kind == "dingtalk":
            if query.get("access_token") != "ACCESS-TOKEN-SECRET":
                return 200, {"errcode": 300001, "errmsg": "token is not exist"}
            if self.secret is not None:
                stamp = query.get("timestamp", "0")
                if abs(now * 1000 - int(stamp)) > 3600 * 1000:
                    return 200, {"errcode": 310000, "errmsg": "invalid timestamp"}
                if query.get("sign") != dingtalk_signature(stamp, self.secret):
                    return 200, {"errcode": 310000, "errmsg": "sign not match"}
            if body.get("msgtype") != "text" or not isinstance(body.get("text", {}).get("content"), str):
                return 200, {"errcode": 40035, "errmsg": "missing parameter"}
            return self._accept(body["text"]["content"], {"errcode": 0, "errmsg": "ok"})
        if self.kind == "wecom":
            content = body.get("markdown", {}).get("content")
            if query.get("key") != "WECOM-KEY-SECRET":
                return 200, {"errcode": 93000, "errmsg": "invalid webhook url"}
            if body.get("msgtype") != "markdown" or not isinstance(content, str) or len(content.encode()) > 4096:
                return 200, {"errcode": 40008, "errmsg": "invalid message type"}
            return self._accept(content, {"errcode": 0, "errmsg": "ok"})
        if not isinstance(body.get("text"), str):
            return 400, "invalid_payload"
        return self._accept(body["text"], "ok")

    def _accept(self, text: str, answer: Any) -> tuple[int, Any]:
        with self.changed:
            self.received.append(text)
            self.changed.notify_all()
        return 200, answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        bot = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                with bot.changed:
                    bot.requests += 1
                    bot.changed.notify_all()
                    failing = bot.fail_first > 0
                    bot.fail_first -= failing
                if bot.hang:
                    bot.release.wait()  # a server that takes the request and never answers
                    return
                if failing:
                    return self._reply(503, "upstream unavailable")
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                try:
                    body = json.loads(data)
                except ValueError:
                    return self._reply(400, "invalid_payload")
                bot.bodies.append(body)
                self._reply(*bot.answer(query, body))

            def _reply(self, status: int, answer: Any) -> None:
                data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                del args

        return Handler


def _size(value: Any) -> int:
    return value if isinstance(value, int) else len(value)


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subject = ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), *subject],
        check=True,
        capture_output=True,
    )
    return cert, key


class MailServer:
    """aiosmtpd on 127.0.0.1: ``security`` starttls (required before AUTH and MAIL), ssl or none; with
    ``login``, AUTH is required and only that user and password pass. ``messages``: what was accepted,
    with whether TLS and a login were in effect."""

    def __init__(self, security: str, cert: Path, key: Path, login: tuple[str, str] | None = None) -> None:
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult

        self.messages: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = self

        class Handler:
            async def handle_DATA(self, smtp: Any, session: Any, envelope: Any) -> str:
                with server.changed:
                    server.messages.append(
                        {
                            "from": envelope.mail_from,
                            "to": list(envelope.rcpt_tos),
                            "message": email.message_from_bytes(envelope.content, policy=email.policy.default),
                            "tls": smtp.transport.get_extra_info("ssl_object") is not None,
                            "user": session.auth_data if session.authenticated else None,
                        }
                    )
                    server.changed.notify_all()
                return "250 OK"

        def authenticate(smtp: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
            good = login is not None and (data.login.decode(), data.password.decode()) == login
            return AuthResult(success=good, handled=False, auth_data=data.login.decode())  # handled=False: 535

        options: dict[str, Any] = {"auth_required": login is not None, "authenticator": authenticate}
        if security == "starttls":
            options.update(tls_context=context, require_starttls=True)
        elif security == "ssl":
            # aiosmtpd's SMTP object does not see a TLS it did not start: it would not offer AUTH at all.
            options.update(ssl_context=context, auth_require_tls=False)
        self.port = _free_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, **options)
        self._controller.start()

    def wait(self, count: int, timeout: float = 60.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.messages) >= count, timeout), self.messages

    def close(self) -> None:
        self._controller.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
