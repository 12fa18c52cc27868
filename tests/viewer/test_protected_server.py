"""A shared TensorBoard: `mftb tensorboard --bind_all` started for real, checked over HTTP(S) from loopback.

Every route TensorBoard's app serves (its own, every plugin's, each static file) is listed from the app
itself, built in this process from the same plugins, and asked without a token, with a wrong one, with
the right one in the query (a redirect setting the cookie), in the cookie and as a Bearer header.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import io
import json
import select
import ssl
import subprocess
import urllib.parse
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MFTB, subprocess_env
from tb_helpers import MftbTensorBoard, listening_addresses, matrices, mftb_tensorboard, wait_for, write_ranks_run

from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import access_token, tensorboard_server

pytestmark = pytest.mark.process

RUN = "llama_tiny_20261129-120000"
TOKEN = "team-token-0123456789abcdef"  # a token the test gives (the generated one is read from the output)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shared") / "tb"
    writer = RunWriter(root / RUN)
    writer.add_session_start(1)
    for step in range(1, 51):
        writer.add_scalars(step, {"train/loss": 1.0 / step})
    writer.close()
    write_ranks_run(root / "job", matrices(16, 5))
    return root


@pytest.fixture(scope="module")
def shared(logdir: Path) -> Iterator[tuple[MftbTensorBoard, str]]:
    """`mftb tensorboard --bind_all` with its generated token, read from the URL it prints."""
    with mftb_tensorboard(logdir, "--bind_all", "--port", str(tensorboard_server.free_port(18606))) as server:
        (ready,) = [line for line in server.lines if line.startswith("TensorBoard is ready:")]
        url = ready.split()[3]
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        (token,) = query["token"]
        yield server, token


def served_routes(logdir: Path) -> dict[str, bytes | None]:
    """Every path TensorBoard's WSGI app routes, from the app built as the server builds it (the same
    plugins: TensorBoard's and every `tensorboard_plugins` entry point, ours included); static files
    with their bytes from TensorBoard's asset zip (None: a route that is not a file)."""
    from tensorboard import default, program
    from tensorboard.backend import application

    board = program.TensorBoard(plugins=default.get_plugins())
    board.configure(["", "--logdir", str(logdir), "--load_fast", "false"])
    provider, multiplexer = board._make_data_provider()
    app = application.TensorBoardWSGIApp(
        board.flags, board.plugin_loaders, provider, board.assets_zip_provider, multiplexer
    )
    with board.assets_zip_provider() as handle:
        assets = zipfile.ZipFile(io.BytesIO(handle.read()))
        files = {f"/{name}": assets.read(name) for name in assets.namelist() if not name.endswith("/")}
    routes = {path: files.get(path) for path in app.exact_routes}
    routes.update({prefix + "x": None for prefix in app.prefix_routes})  # none in TensorBoard 2.21: said below
    return routes


def request(
    port: int,
    path: str,
    headers: dict[str, str] | None = None,
    source: str = "127.0.0.1",
    method: str = "GET",
    body: bytes | None = None,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request from ``source`` (any 127.x.y.z: another client as the server sees it)."""
    if tls is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(source, 0))
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=60, context=tls)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_every_route_needs_the_token_and_the_token_opens_every_route(
    shared: tuple[MftbTensorBoard, str], logdir: Path
) -> None:
    server, token = shared
    port = server.port
    assert listening_addresses(port) & {"0.0.0.0", "::"}  # every interface; this test comes through 127.0.0.1
    routes = served_routes(logdir)
    assert len(routes) > 150 and sum(body is not None for body in routes.values()) > 80  # TensorBoard 2.21: 174, 83
    ours = {path for path in routes if path.startswith(("/data/plugin/ranks/", "/data/plugin/moe/"))}
    assert {"/data/plugin/ranks/stragglers", "/data/plugin/moe/strip", "/data/plugin/ranks/index.js"} <= ours
    routes["/no/such/route"] = None  # an unknown path is refused too, not answered 404
    bearer = {"Authorization": f"Bearer {token}"}
    for path, asset in sorted(routes.items()):
        status, headers, body = request(port, path)
        assert (status, body) == (401, access_token.PAGE_401), path
        assert headers["www-authenticate"].startswith("Bearer") and "set-cookie" not in headers

        status, _, with_header = request(port, path, bearer)
        assert status != 401, path
        if asset is not None:  # a static file: the asset zip's bytes (index.html after TensorBoard's <meta>)
            assert status == 200 and with_header.endswith(asset), path

        status, headers, _ = request(port, f"{path}?token={token}&keep=1")
        assert status == 303 and headers["location"] == f"{path}?keep=1", (path, headers)
        cookie, *attributes = headers["set-cookie"].split("; ")
        assert cookie == f"{access_token.cookie_name(port)}={token}"
        assert set(attributes) == {"Path=/", "HttpOnly", "SameSite=Lax"}  # plain HTTP: no Secure

        status, _, with_cookie = request(port, path, {"Cookie": f"other=1; {cookie}"})
        assert status != 401 and (asset is None or with_cookie.endswith(asset)), path
    # What the data routes answer with the token: the runs and values written above.
    assert sorted(wait_for(lambda: json.loads(request(port, "/data/runs", bearer)[2]))) == ["job", RUN]
    points = json.loads(request(port, f"/data/plugin/scalars/scalars?run={RUN}&tag=train/loss", bearer)[2])
    assert [(step, value) for _, step, value in points] == [(s, pytest.approx(1.0 / s)) for s in range(1, 51)]
    (ranks,) = json.loads(request(port, "/data/plugin/ranks/runs", bearer)[2])
    assert (ranks["run"], ranks["world_size"], ranks["records"]) == ("job", 16, 5)
    experiment = b'{"experimentName": ""}'
    assert request(port, "/data/plugin/hparams/experiment", method="POST", body=experiment)[0] == 401
    assert request(port, "/data/plugin/hparams/experiment", bearer, method="POST", body=experiment)[0] == 200
    # The token is printed once, in the URL the user needs; never in what the server logs.
    assert server.output.count(token) == 1, server.output


def test_a_wrong_token_is_refused_slowed_for_that_client_only(shared: tuple[MftbTensorBoard, str]) -> None:
    server, token = shared
    port = server.port
    wrong = {"Authorization": "Bearer " + "x" * len(token)}
    # Wrong tokens in each of the three places, from clients of their own: each refused with the page.
    attempts = [
        ("/data/runs", wrong),
        ("/data/runs?token=" + token[:-1] + "y", {}),
        ("/data/plugin/ranks/runs", {"Cookie": f"{access_token.cookie_name(port)}={token.upper()}"}),
    ]
    for number, (path, headers) in enumerate(attempts):
        assert request(port, path, headers, source=f"127.0.9.{number + 1}")[::2] == (401, access_token.PAGE_401)
    # One client's failures slow its next answer (0.25 s, then doubling: 4 s at the fifth) without holding
    # up another client: a right token sent after the fifth wrong one is answered before it.
    for _ in range(4):
        assert request(port, "/data/runs", wrong, source="127.0.8.1")[0] == 401
    slowed = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=("127.0.8.1", 0))
    try:
        slowed.request("GET", "/data/runs", headers=wrong)
        other = request(port, "/data/runs", {"Authorization": f"Bearer {token}"}, source="127.0.8.2")
        assert other[0] == 200
        assert select.select([slowed.sock], [], [], 0)[0] == [], "a client's delay held up another client"
        assert slowed.getresponse().status == 401
    finally:
        slowed.close()
    # The refusals are said on the server's stderr once per client, without the token tried.
    assert server.output.count("from ::ffff:127.0.8.1 (a wrong token)") == 1, server.output
    assert token[:-1] + "y" not in server.output and token.upper() not in server.output


def test_many_clients_at_once_each_get_their_answer(shared: tuple[MftbTensorBoard, str]) -> None:
    """Wrong tokens from 40 clients at once (each slowed by its own first delay) beside right ones."""
    server, token = shared
    jobs = [(f"127.0.7.{n}", "wrong-token-" + "z" * 20) for n in range(1, 41)]
    jobs += [(f"127.0.6.{n}", token) for n in range(1, 11)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(
            pool.map(
                lambda job: request(server.port, "/data/runs", {"Authorization": f"Bearer {job[1]}"}, job[0])[0],
                jobs,
            )
        )
    assert statuses == [401] * 40 + [200] * 10


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost with its key, made by the openssl program (fixed arguments)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


def test_https_with_a_certificate_and_the_token_from_the_environment(
    logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))  # the client checks the server's certificate
    port = tensorboard_server.free_port(18706)
    options = ("--bind_all", "--port", str(port), "--certfile", str(cert), "--keyfile", str(key))
    with mftb_tensorboard(logdir, *options, env={access_token.TOKEN_ENV: TOKEN}) as server:
        assert "TensorBoard is ready: https://" in server.output
        assert f"Access token from {access_token.TOKEN_ENV}: open https://" in server.output
        assert request(port, "/data/runs", tls=trusted)[::2] == (401, access_token.PAGE_401)
        runs = wait_for(
            lambda: json.loads(request(port, "/data/runs", {"Authorization": f"Bearer {TOKEN}"}, tls=trusted)[2])
        )
        assert sorted(runs) == ["job", RUN]
        status, headers, _ = request(port, f"/?token={TOKEN}", tls=trusted)
        assert status == 303 and headers["set-cookie"].endswith("; Secure")  # the cookie travels over HTTPS only
        with pytest.raises((http.client.HTTPException, OSError)):  # plain HTTP gets no answer
            request(port, "/data/runs", {"Authorization": f"Bearer {TOKEN}"})
        assert "asking for its access token" in tensorboard_server.who_listens(port)  # what `mftb doctor` says
        monkeypatch.setenv(access_token.TOKEN_ENV, TOKEN)
        assert tensorboard_server.probe(port).logdir == str(logdir)  # ... and sees with the token
    assert TOKEN not in server.output  # given by the user: never printed


def test_auth_none_opts_out_with_a_warning_and_loopback_needs_no_token(logdir: Path) -> None:
    port = tensorboard_server.free_port(18806)
    with mftb_tensorboard(logdir, "--bind_all", "--auth", "none", "--port", str(port)) as server:
        assert "WARNING: --bind_all --auth none: TensorBoard listens on every network interface and asks no token" in (
            server.output
        )
        assert request(port, "/data/runs")[0] == 200
    with mftb_tensorboard(logdir, "--port", str(port), env={access_token.TOKEN_ENV: TOKEN}) as server:
        assert f"TensorBoard is ready: http://127.0.0.1:{port}/  (Ctrl-C stops it)" in server.output
        assert request(port, "/data/runs")[0] == 200  # loopback: as before, the variable does not apply
    with mftb_tensorboard(logdir, "--port", str(port), "--auth", "token") as server:  # asked for on loopback
        assert request(port, "/data/runs")[0] == 401 and "?token=" in server.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--token", "short"], "the token from --token has 5 characters; at least 16 are required"),
        (["--token", "a b" * 8], "the token from --token holds characters other than letters, digits and - . _ ~"),
        (["--token", TOKEN, "--token_file", "t.txt"], "give the token once: --token or --token_file, not both"),
        (["--bind_all", "--auth", "none", "--token", TOKEN], "--auth none asks for no token"),
        (["--bind_all", "--token_file", "missing.txt"], "--token_file missing.txt: cannot read it"),
        (["--bind_all", "--certfile", "cert.txt"], "--certfile cert.txt: cannot load it"),
        (["--keyfile", "key.pem"], "--keyfile needs --certfile"),
    ],
)
def test_bad_access_options_are_usage_errors(logdir: Path, tmp_path: Path, options: list[str], message: str) -> None:
    (tmp_path / "cert.txt").write_text("not a certificate\n")
    command = [MFTB, "tensorboard", str(logdir), *options]
    result = subprocess.run(command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert TOKEN not in result.stderr
