"""The access token (viewer/access_token.py): where it comes from, the delays of wrong tokens per client,
and TokenGate in front of TensorBoard's real WSGI app, called in this process through werkzeug's client
(the same gate behind a real server: tests/viewer/test_protected_server.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from werkzeug.test import Client

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import access_token
from mindformers_tbplugin.viewer.access_token import FailureThrottle, TokenGate, delay_after

TOKEN = "team-token-0123456789abcdef"


def test_the_token_comes_from_the_flag_then_the_file_then_the_environment_else_is_generated(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text(f"  {TOKEN}\n")
    file.chmod(0o600)
    environ = {access_token.TOKEN_ENV: "from-the-environment-0123"}
    assert access_token.resolve(TOKEN, None, environ) == (TOKEN, "--token")
    assert access_token.resolve(None, file, environ) == (TOKEN, f"--token_file {file}")
    assert access_token.resolve(None, None, environ) == ("from-the-environment-0123", access_token.TOKEN_ENV)
    generated, source = access_token.resolve(None, None, {})
    assert source == "generated" and len(generated) == 32 and access_token.check(generated, "x") == generated
    assert generated != access_token.resolve(None, None, {})[0]


def test_a_token_file_readable_by_others_is_used_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    file = tmp_path / "token"
    file.write_text(TOKEN)
    file.chmod(0o644)
    assert access_token.read_file(file) == TOKEN
    assert f"WARNING: --token_file {file} can be read by other users (chmod 600 it)." in capsys.readouterr().err


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("a" * 15, "has 15 characters; at least 16 are required"),
        ("a" * 16 + "/", "holds characters other than letters, digits and - . _ ~"),
        ("a" * 16 + ";x", "holds characters other than"),
    ],
)
def test_an_unusable_token_is_refused_without_being_repeated(token: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        access_token.check(token, access_token.TOKEN_ENV)
    assert message in str(refused.value) and token not in str(refused.value)
    assert str(refused.value).startswith(f"the token from {access_token.TOKEN_ENV} ")


def test_an_empty_token_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(UsageError, match="is empty"):
        access_token.read_file(tmp_path / "empty")


def test_wrong_tokens_wait_longer_each_time_per_client_and_are_forgotten() -> None:
    assert [delay_after(n) for n in range(8)] == [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    now = [0.0]
    throttle = FailureThrottle(clock=lambda: now[0])
    assert [throttle.failed("10.0.0.1") for _ in range(4)] == [0.25, 0.5, 1.0, 2.0]
    assert throttle.failed("10.0.0.2") == 0.25  # another client: its own count
    now[0] += access_token.FORGET_AFTER + 1
    assert throttle.failed("10.0.0.1") == 0.25  # quiet for FORGET_AFTER: counted afresh
    throttle.failed("10.0.0.1")
    throttle.succeeded("10.0.0.1")
    assert throttle.failed("10.0.0.1") == 0.25  # the right token clears the count


def test_the_failure_records_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_token, "MAX_CLIENTS", 3)
    throttle = FailureThrottle()
    for client in ("a", "b", "a", "c", "d"):  # "b" is the oldest when "d" comes
        throttle.failed(client)
    assert throttle.failed("a") == 1.0 and throttle.failed("b") == 0.25


@pytest.fixture(scope="module")
def tensorboard_app(tmp_path_factory: pytest.TempPathFactory) -> object:
    """TensorBoard's WSGI app over a logdir of one run, as its server builds it (every plugin)."""
    from tensorboard import default, program
    from tensorboard.backend import application

    logdir = tmp_path_factory.mktemp("gate") / "tb"
    writer = RunWriter(logdir / "run")
    writer.add_scalars(1, {"train/loss": 3.0})
    writer.close()
    board = program.TensorBoard(plugins=default.get_plugins())
    board.configure(["", "--logdir", str(logdir), "--load_fast", "false", "--reload_interval", "0"])
    provider, multiplexer = board._make_data_provider()
    return application.TensorBoardWSGIApp(
        board.flags, board.plugin_loaders, provider, board.assets_zip_provider, multiplexer
    )


def gate_over(app: object, port: int = 6006, secure: bool = False, prefix: str = "") -> tuple[TokenGate, list[float]]:
    """The gate with its sleeps recorded instead of slept (what it would wait, not the wait itself)."""
    gate = TokenGate(app, TOKEN, port, secure, prefix)
    slept: list[float] = []
    gate._sleep = slept.append
    return gate, slept


def test_the_gate_lets_the_token_through_from_each_place_and_slows_guesses(tensorboard_app: object) -> None:
    gate, slept = gate_over(tensorboard_app)
    client = Client(gate, use_cookies=False)  # the Cookie headers as given
    first = {"REMOTE_ADDR": "10.0.0.1"}
    refused = client.get("/data/runs", environ_base=first)
    assert (refused.status_code, refused.data) == (401, access_token.PAGE_401) and slept == []  # no token: no guess
    for headers in ({"Authorization": "Bearer " + TOKEN[:-1] + "x"}, {"Cookie": "mftb_tensorboard_token_6006=nope"}):
        assert client.get("/data/runs", headers=headers, environ_base=first).status_code == 401
    assert client.get(f"/data/runs?token={TOKEN}x", environ_base=first).status_code == 401
    assert (
        client.get(
            "/data/runs", environ_base={"REMOTE_ADDR": "10.0.0.2"}, headers={"Authorization": "Bearer " + "y" * 20}
        ).status_code
        == 401
    )
    assert slept == [0.25, 0.5, 1.0, 0.25]  # the first client's three guesses, then another client's first
    # The right token, each way: TensorBoard answers (the run list); the query's token never reaches it.
    for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"Cookie": f"a=1; mftb_tensorboard_token_6006={TOKEN}"}):
        answer = client.get("/data/runs", headers=headers, environ_base=first)
        assert (answer.status_code, json.loads(answer.data)) == (200, ["run"])
    assert client.get(f"/data/runs?token={TOKEN}", environ_base=first).status_code == 303
    posted = client.post(f"/data/plugin/hparams/experiment?token={TOKEN}", json={"experimentName": ""})
    assert posted.status_code == 200  # not a GET: answered at once, without a redirect
    assert (
        client.get("/data/runs", headers={"Authorization": "Bearer " + "y" * 20}, environ_base=first).status_code == 401
    )
    assert slept[-1] == 0.25  # the right token cleared the first client's count


def test_the_redirect_keeps_the_path_and_the_other_parameters_and_sets_the_cookie(tensorboard_app: object) -> None:
    gate, _ = gate_over(tensorboard_app, port=7007, secure=True, prefix="/tb")
    answer = Client(gate).get(f"/data/plugin/scalars/scalars?run=a%20b&token={TOKEN}&tag=train%2Floss")
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/data/plugin/scalars/scalars?run=a%20b&tag=train%2Floss"
    assert (
        answer.headers["Set-Cookie"] == f"mftb_tensorboard_token_7007={TOKEN}; Path=/tb; HttpOnly; SameSite=Lax; Secure"
    )
    assert answer.headers["Cache-Control"] == "no-store" and answer.headers["Referrer-Policy"] == "no-referrer"
    assert access_token._split_query(f"a=1&tok%65n={TOKEN}&b=&c") == ("a=1&b=&c", TOKEN)  # spelled escaped too
    assert access_token._split_query("") == ("", None)
