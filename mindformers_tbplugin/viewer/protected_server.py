"""TensorBoard behind the access token and/or TLS: the process ``mftb tensorboard`` starts for a shared server.

The ``tensorboard`` program's own main, with two changes: its Werkzeug server serves TensorBoard's whole
WSGI app through :class:`~.access_token.TokenGate` (so every route, whichever plugin adds it, is behind
it), and over TLS when given a certificate. The token comes in the environment (``TOKEN_ENV``), never on
the command line where ``ps`` would show it, and is removed from the environment before TensorBoard
starts its data server.

Run as ``python -m mindformers_tbplugin.viewer.protected_server [--certfile F [--keyfile F]] -- TENSORBOARD_ARGS``.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Callable

from mindformers_tbplugin.viewer.access_token import TOKEN_ENV, TokenGate


def tls_context(certfile: str, keyfile: str | None) -> ssl.SSLContext:
    """The server's TLS context (TLS 1.2 or later); ``ssl.SSLError``/``OSError`` when the files do not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context


def server_factory(token: str | None, tls: ssl.SSLContext | None) -> Callable:
    """A ``server_class`` for ``program.TensorBoard``: its Werkzeug server with the gate and TLS."""
    from tensorboard import program

    class _Handler(program._WSGIRequestHandler):  # TensorBoard's HTTP/1.1 handler
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            """Says nothing: a request line may hold ``?token=`` (TensorBoard logs none by default anyway)."""

        def handle(self) -> None:
            # The TLS handshake runs here, on the connection's own thread (see below), not in accept().
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.settimeout(30)
                try:
                    self.connection.do_handshake()
                except OSError:  # ssl.SSLError too: a plain-HTTP or broken client, nothing to answer
                    return
                self.connection.settimeout(None)
            super().handle()

    class ProtectedServer(program.WerkzeugServer):
        def __init__(self, wsgi_app: Callable, flags: argparse.Namespace) -> None:
            app = wsgi_app
            if token:
                app = TokenGate(wsgi_app, token, flags.port, secure=tls is not None, path_prefix=flags.path_prefix)
            super().__init__(app, flags)
            self.RequestHandlerClass = _Handler
            if tls is not None:
                # Werkzeug's own wrapping handshakes in accept(): one stalled client would block every other.
                self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
                self.ssl_context = tls

        def get_url(self) -> str:
            url = super().get_url()
            return "https" + url[len("http") :] if tls is not None else url

    return program.with_port_scanning(ProtectedServer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mindformers_tbplugin.viewer.protected_server")
    parser.add_argument("--certfile")
    parser.add_argument("--keyfile")
    parser.add_argument("tensorboard_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    tensorboard_args = args.tensorboard_args[1:] if args.tensorboard_args[:1] == ["--"] else args.tensorboard_args
    token = os.environ.pop(TOKEN_ENV, None) or None  # not inherited by the data server TensorBoard starts
    tls = tls_context(args.certfile, args.keyfile) if args.certfile else None

    from absl import app
    from tensorboard import default, main_lib, program
    from tensorboard.plugins import base_plugin

    main_lib.global_init()
    board = program.TensorBoard(plugins=default.get_plugins(), server_class=server_factory(token, tls))
    try:
        app.run(board.main, argv=["tensorboard", *tensorboard_args], flags_parser=board.configure)
    except base_plugin.FlagsError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
