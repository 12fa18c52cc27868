"""E-mail over SMTP: ``{email: {host, port, to, from, security, user_env, password_env}}``.

``security``: ``starttls`` (default; port 587), ``ssl`` (TLS from the first byte, port 465) or ``none``
(port 25, no login allowed). The server's certificate is verified against the system's authorities, or
``ca_file`` (a team's own CA). The login comes from environment variables (or ``password_file``),
never from the YAML.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from typing import Any

from mindformers_tbplugin.alerts.alert_text import alert_text, summary_text
from mindformers_tbplugin.alerts.delivery import DeliveryError, MessageSink, Summary, secret
from mindformers_tbplugin.alerts.record import Alert

TIMEOUT_S = 10.0
PORTS = {"starttls": 587, "ssl": 465, "none": 25}
OPTIONS = ("host", "port", "to", "from", "security", "user_env", "password_env", "password_file", "ca_file")


class EmailSink(MessageSink):
    label = "email"

    def __init__(
        self,
        host: str,
        port: int,
        to: list[str],
        sender: str,
        security: str = "starttls",
        login: tuple[str, str] | None = None,
        ca_file: str | None = None,
        tensorboard: str | None = None,
        **delivery: Any,
    ) -> None:
        super().__init__(**delivery)
        self.host, self.port, self.to, self.sender = host, port, to, sender
        self.security = security
        self._login = login
        self.ca_file = ca_file
        self.tensorboard = tensorboard

    def describe(self) -> str:
        return f"email {self.host}:{self.port} ({self.security}) to {', '.join(self.to)}"

    def send(self, item: Alert | Summary) -> None:
        text = alert_text(item, self.tensorboard) if isinstance(item, Alert) else summary_text(item, self.tensorboard)
        message = EmailMessage()
        message["Subject"] = f"[mftb] {text.title}"
        message["From"] = self.sender
        message["To"] = ", ".join(self.to)
        message.set_content("\n".join(text.lines) + "\n")
        try:
            self._send(message)
        except smtplib.SMTPAuthenticationError as exc:
            raise DeliveryError(f"login refused ({exc.smtp_code})", False) from None
        except smtplib.SMTPRecipientsRefused as exc:
            raise DeliveryError(f"recipients refused: {', '.join(exc.recipients)}", False) from None
        except smtplib.SMTPResponseException as exc:
            reply = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else exc.smtp_error
            raise DeliveryError(f"server answered {exc.smtp_code} {reply}", exc.smtp_code < 500) from None
        except ssl.SSLError as exc:  # a certificate that does not verify will not verify on retry
            raise DeliveryError(f"TLS: {exc.reason or exc}", False) from None
        except smtplib.SMTPNotSupportedError as exc:
            raise DeliveryError(str(exc), False) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise DeliveryError(f"{self.host}:{self.port} unreachable: {exc}", True) from None

    def _send(self, message: EmailMessage) -> None:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.security == "ssl":
            server: smtplib.SMTP = smtplib.SMTP_SSL(self.host, self.port, timeout=TIMEOUT_S, context=context)
        else:
            server = smtplib.SMTP(self.host, self.port, timeout=TIMEOUT_S)
        with server:
            if self.security == "starttls":
                server.starttls(context=context)
            if self._login is not None:
                server.login(*self._login)
            server.send_message(message)


def build_email(value: Any, tensorboard: str | None) -> tuple[EmailSink | None, list]:
    """An e-mail sink from its mapping, or the problems ``[(key, message)]`` (keys below ``email``)."""
    if not isinstance(value, Mapping):
        return None, [("email", "expected a mapping like {host: smtp.example.com, to: [a@example.com], from: ...}")]
    allowed = ", ".join(OPTIONS)
    problems = [(f"email.{key}", f"unknown option (allowed: {allowed})") for key in value if key not in OPTIONS]
    security = value.get("security", "starttls")
    if security not in PORTS:
        problems.append(("email.security", f"expected one of {', '.join(PORTS)}, got {security!r}"))
    for key in ("host", "from"):
        if not (isinstance(value.get(key), str) and value[key].strip()):
            problems.append((f"email.{key}", f"required: a non-empty string, got {value.get(key)!r}"))
    to = [value["to"]] if isinstance(value.get("to"), str) else value.get("to")
    if not (isinstance(to, list) and to and all(isinstance(a, str) and "@" in a for a in to)):
        problems.append(("email.to", f"required: a list of addresses, got {value.get('to')!r}"))
    port = value.get("port", PORTS.get(security, 0))
    if not (isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536):
        problems.append(("email.port", f"expected a port number, got {port!r}"))
    for key in ("user_env", "password_env", "password_file", "ca_file"):
        if key in value and not (isinstance(value[key], str) and value[key].strip()):
            problems.append((f"email.{key}", f"expected a name or path, got {value[key]!r}"))
    password_given = "password_env" in value or "password_file" in value
    if "password_env" in value and "password_file" in value:
        problems.append(("email.password_file", "give password_env or password_file, not both"))
    if password_given != ("user_env" in value):
        problems.append(("email.user_env", "a login needs both user_env and password_env (or password_file)"))
    if "user_env" in value and security == "none":
        problems.append(("email.security", "no login over an unencrypted connection: use starttls or ssl"))
    if problems:
        return None, problems
    login, why = None, None
    if "user_env" in value:
        user, why = secret(value["user_env"], None)
        password, password_why = secret(value.get("password_env"), value.get("password_file"))
        why = why or password_why
        login = None if why else (user, password)
    sink = EmailSink(value["host"], port, to, value["from"], security, login, value.get("ca_file"), tensorboard)
    sink.unavailable = why
    return sink, []
