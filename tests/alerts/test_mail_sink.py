"""The e-mail sink against a real SMTP server on loopback (aiosmtpd) with STARTTLS, SSL or none, a
self-signed certificate made by openssl, and AUTH with the login from environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from bot_servers import MailServer, self_signed_certificate
from conftest import plugin_log

from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.sinks import build_sinks, unavailable_sinks

ALERT = Alert(
    "nonfinite",
    "train/loss",
    2,
    float("nan"),
    None,
    "train/loss is nan at step 2",
    "critical",
    action="stop",
    run="diverged/run1",
    incident={"ranks": [{"rank": 0, "value": "nan"}], "ranks_tag": "train/loss", "resume": ["data_skip_steps: 2"]},
)
PASSWORD = "p@ss-w0rd-SECRET"
# aiosmtpd warns of AUTH without its own TLS on the SSL server, whose TLS is below SMTP (bot_servers.py).
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def login_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MFTB_TEST_SMTP_USER", "alerts@team.example")
    monkeypatch.setenv("MFTB_TEST_SMTP_PASSWORD", PASSWORD)


def email_spec(server: MailServer, security: str, cert: Path, login: bool = True) -> dict:
    spec = {
        "host": "127.0.0.1",
        "port": server.port,
        "to": ["oncall@team.example", "lead@team.example"],
        "from": "mftb@team.example",
        "security": security,
        "ca_file": str(cert),
    }
    if login:
        spec.update(user_env="MFTB_TEST_SMTP_USER", password_env="MFTB_TEST_SMTP_PASSWORD")
    return {"email": spec}


@pytest.mark.parametrize("security", ["starttls", "ssl"])
def test_mail_over_tls_with_login(certificate, login_env, security: str) -> None:
    cert, key = certificate
    server = MailServer(security, cert, key, login=("alerts@team.example", PASSWORD))
    try:
        (sink,), problems = build_sinks([email_spec(server, security, cert)], tensorboard="http://tb.team")
        assert problems == [] and sink.describe() == (
            f"email 127.0.0.1:{server.port} ({security}) to oncall@team.example, lead@team.example"
        )
        with plugin_log() as log:
            sink.emit(ALERT)
            sink.close(timeout=60)
        assert log == []
        (mail,) = server.messages
    finally:
        server.close()
    assert mail["tls"] and mail["user"] == "alerts@team.example"
    assert mail["from"] == "mftb@team.example" and mail["to"] == ["oncall@team.example", "lead@team.example"]
    message = mail["message"]
    # Python folds a long Subject right after "Subject:"; unfolded, the value starts with that space.
    assert message["Subject"].lstrip() == "[mftb] [critical] nonfinite on train/loss at step 2 on run diverged/run1"
    assert message.get_content().splitlines() == [
        "rule: nonfinite (critical, action stop)",
        "run: diverged/run1",
        "step: 2",
        "tag: train/loss",
        "value: nan",
        "train/loss is nan at step 2",
        "ranks by train/loss, highest first: rank 0 nan",
        "resume with:",
        "    data_skip_steps: 2",
        "TensorBoard: http://tb.team/?runFilter=diverged%2Frun1#timeseries",
    ]


def test_plain_smtp_without_login(certificate) -> None:
    cert, key = certificate
    server = MailServer("none", cert, key)
    try:
        (sink,), _ = build_sinks([email_spec(server, "none", cert, login=False)])
        sink.emit(ALERT)
        sink.close(timeout=60)
        (mail,) = server.messages
    finally:
        server.close()
    assert not mail["tls"] and mail["user"] is None


def test_a_wrong_password_is_said_once_without_the_password(certificate, monkeypatch) -> None:
    cert, key = certificate
    server = MailServer("starttls", cert, key, login=("alerts@team.example", "the-right-one"))
    monkeypatch.setenv("MFTB_TEST_SMTP_USER", "alerts@team.example")
    monkeypatch.setenv("MFTB_TEST_SMTP_PASSWORD", PASSWORD)
    try:
        (sink,), _ = build_sinks([email_spec(server, "starttls", cert)])
        with plugin_log() as log:
            sink.emit(ALERT)
            sink.emit(Alert("spike", "train/loss", 9, 9.0, 1.0, "spike", "warning"))
            sink.close(timeout=60)
    finally:
        server.close()
    assert server.messages == []
    (line,) = log
    assert f"alert email 127.0.0.1:{server.port} (starttls)" in line and "failed: login refused (535)" in line
    assert PASSWORD not in line


def test_a_certificate_that_does_not_verify_is_a_failure(certificate, login_env, tmp_path: Path) -> None:
    cert, key = certificate
    other, _ = self_signed_certificate(tmp_path)  # a different authority: the server's certificate fails
    server = MailServer("ssl", cert, key, login=("alerts@team.example", PASSWORD))
    try:
        (sink,), _ = build_sinks([email_spec(server, "ssl", other)])
        with plugin_log() as log:
            sink.emit(ALERT)
            sink.close(timeout=60)
    finally:
        server.close()
    assert server.messages == []
    (line,) = log
    assert "failed: TLS: CERTIFICATE_VERIFY_FAILED" in line


def test_unset_login_variables_switch_the_sink_off_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MFTB_TEST_SMTP_USER", raising=False)
    spec = {"host": "smtp.team.example", "to": "oncall@team.example", "from": "mftb@team.example"}
    spec.update(user_env="MFTB_TEST_SMTP_USER", password_env="MFTB_TEST_SMTP_PASSWORD")
    (problem,) = unavailable_sinks(["log", {"email": spec}])
    assert problem.render() == (
        "sinks[1]: alert sink email smtp.team.example:587 (starttls) to oncall@team.example is off: "
        "environment variable MFTB_TEST_SMTP_USER is not set; the other sinks carry on"
    )


def test_bad_email_entries_name_each_key() -> None:
    _, problems = build_sinks(
        [
            {"email": {"host": "", "to": ["not-an-address"], "security": "tls", "port": 70000, "pasword_env": "P"}},
            {"email": {"host": "h", "to": ["a@b"], "from": "c@d", "security": "none", "user_env": "U"}},
        ]
    )
    assert [problem.render() for problem in problems] == [
        "sinks[0].email.pasword_env: unknown option (allowed: host, port, to, from, security, user_env, "
        "password_env, password_file, ca_file)",
        "sinks[0].email.security: expected one of starttls, ssl, none, got 'tls'",
        "sinks[0].email.host: required: a non-empty string, got ''",
        "sinks[0].email.from: required: a non-empty string, got None",
        "sinks[0].email.to: required: a list of addresses, got ['not-an-address']",
        "sinks[0].email.port: expected a port number, got 70000",
        "sinks[1].email.user_env: a login needs both user_env and password_env (or password_file)",
        "sinks[1].email.security: no login over an unencrypted connection: use starttls or ssl",
    ]
