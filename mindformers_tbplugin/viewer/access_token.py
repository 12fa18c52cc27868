"""The access token of a shared TensorBoard: where it comes from, and the WSGI gate in front of every route.

TensorBoard has no authentication of its own. :class:`TokenGate` wraps its whole WSGI app (TensorBoard's
routes, every plugin's, the static files), so nothing is served without the token: given once as
``?token=`` (then kept in an HttpOnly cookie, and the browser sent back to the URL without it), or as
``Authorization: Bearer`` by scripts. Tokens are compared in constant time; a wrong one is answered 401
after a delay that grows with that client's recent failures, slept on that request's own thread.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote, unquote_plus

from mindformers_tbplugin.errors import UsageError

TOKEN_ENV = "MFTB_TENSORBOARD_TOKEN"
REALM = 'Bearer realm="TensorBoard"'  # the WWW-Authenticate of a refusal: how `mftb doctor` knows the gate
QUERY_KEY = "token"
MIN_LENGTH = 16
GENERATED_BYTES = 24  # 32 URL-safe characters, 192 bits
_ALLOWED = re.compile(r"[A-Za-z0-9._~-]+")  # URL- and cookie-safe as they are (RFC 3986 unreserved)

FIRST_DELAY = 0.25  # seconds before the 401 of a client's first wrong token; doubled per failure...
MAX_DELAY = 5.0  # ... up to this
FORGET_AFTER = 600.0  # a client's failures count for this long after its last one
MAX_CLIENTS = 4096  # failure records kept; the oldest go first

PAGE_401 = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>TensorBoard: access token needed</title></head>
<body style="font: 15px sans-serif; margin: 40px; max-width: 46em">
<h1>This TensorBoard needs its access token</h1>
<p>Open the URL that <code>mftb tensorboard</code> printed when it started (the one ending in
<code>?token=...</code>), or ask the person who started it for the token and add <code>?token=TOKEN</code>
to this address. The browser keeps it for the next pages.</p>
<p>Scripts send it as a header: <code>Authorization: Bearer TOKEN</code>.</p>
</body></html>
"""


def generate() -> str:
    return secrets.token_urlsafe(GENERATED_BYTES)


def check(token: str, source: str) -> str:
    """``token`` if it is usable, else a :class:`UsageError` naming ``source`` (never the token itself)."""
    if len(token) < MIN_LENGTH:
        raise UsageError(f"the token from {source} has {len(token)} characters; at least {MIN_LENGTH} are required")
    if not _ALLOWED.fullmatch(token):
        raise UsageError(
            f"the token from {source} holds characters other than letters, digits and - . _ ~ "
            "(it travels in URLs and cookies as it is)"
        )
    return token


def read_file(path: Path) -> str:
    """The token in ``path`` (surrounding whitespace dropped); a :class:`UsageError` if unreadable or empty."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--token_file {path}: cannot read it ({error.__class__.__name__}: {error})") from None
    if not text:
        raise UsageError(f"--token_file {path} is empty")
    if os.name == "posix" and path.stat().st_mode & 0o077:
        print(f"WARNING: --token_file {path} can be read by other users (chmod 600 it).", file=sys.stderr, flush=True)
    return check(text, f"--token_file {path}")


def resolve(flag: str | None, file: Path | None, environ: dict[str, str]) -> tuple[str, str]:
    """The token and where it came from: ``--token``, else ``--token_file``, else the environment, else a new one."""
    if flag is not None and file is not None:
        raise UsageError("give the token once: --token or --token_file, not both")
    if flag is not None:
        return check(flag, "--token"), "--token"
    if file is not None:
        return read_file(file), f"--token_file {file}"
    if environ.get(TOKEN_ENV):
        return check(environ[TOKEN_ENV], TOKEN_ENV), TOKEN_ENV
    return generate(), "generated"


def cookie_name(port: int) -> str:
    """Browsers keep cookies per host, not per port: each server's cookie is named after its port."""
    return f"mftb_tensorboard_token_{port}"


class FailureThrottle:
    """Per client address: the delay before answering its next wrong token (doubling, capped, forgotten
    after FORGET_AFTER). Only the bookkeeping takes the lock; the caller sleeps on its own thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # client -> (count, last failure)
        self._lock = threading.Lock()

    def failed(self, client: str) -> float:
        """Record a failure of ``client``; the seconds to wait before answering it."""
        now = self._clock()
        with self._lock:
            count, last = self._failures.pop(client, (0, now))
            count = 1 if now - last > FORGET_AFTER else count + 1
            self._failures[client] = (count, now)
            while len(self._failures) > MAX_CLIENTS:
                self._failures.popitem(last=False)
        return delay_after(count)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


def delay_after(failures: int) -> float:
    """0.25 s after a first failure, doubling to 5 s from the sixth on."""
    return min(FIRST_DELAY * 2 ** (failures - 1), MAX_DELAY) if failures > 0 else 0.0


class TokenGate:
    """WSGI middleware: ``app`` is reached only with the token (query, cookie or Bearer header)."""

    def __init__(self, app: Callable, token: str, port: int, secure: bool, path_prefix: str = "") -> None:
        self.app = app
        self._token = token.encode()
        self._cookie = cookie_name(port)
        self._cookie_attributes = f"Path={path_prefix.rstrip('/') or '/'}; HttpOnly; SameSite=Lax" + (
            "; Secure" if secure else ""
        )
        self.throttle = FailureThrottle()
        self._reported: set[str] = set()  # clients whose refusal was said once on stderr
        self._sleep = time.sleep

    def _matches(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self._token)

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        client = environ.get("REMOTE_ADDR", "?")
        kept, from_query = _split_query(environ.get("QUERY_STRING", ""))
        from_cookie = _cookie_value(environ.get("HTTP_COOKIE", ""), self._cookie)
        from_header = _bearer(environ.get("HTTP_AUTHORIZATION", ""))
        if self._matches(from_query) and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
            self.throttle.succeeded(client)
            return self._redirect_without_token(environ, kept, start_response)
        if self._matches(from_query) or self._matches(from_cookie) or self._matches(from_header):
            self.throttle.succeeded(client)
            environ["QUERY_STRING"] = kept  # the app (and anything it logs) never sees the token
            return self.app(environ, start_response)
        presented = any(value is not None for value in (from_query, from_cookie, from_header))
        if presented:  # a guess: slowed; a request without any token (a first visit) is not
            self._sleep(self.throttle.failed(client))
        self._report(client, environ, presented)
        return _refuse(start_response)

    def _redirect_without_token(self, environ: dict, kept: str, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        location = quote(path.encode("latin-1"), safe="/:@!$&'()*+,;=-._~") or "/"
        if kept:
            location += "?" + kept
        start_response(
            "303 See Other",
            [
                ("Location", location),
                ("Set-Cookie", f"{self._cookie}={self._token.decode()}; {self._cookie_attributes}"),
                ("Cache-Control", "no-store"),
                ("Referrer-Policy", "no-referrer"),
                ("Content-Length", "0"),
            ],
        )
        return [b""]

    def _report(self, client: str, environ: dict, presented: bool) -> None:
        """Said once per client on stderr, without the query (it may hold a wrong token)."""
        if client in self._reported or len(self._reported) >= MAX_CLIENTS:
            return
        self._reported.add(client)
        what = "a wrong token" if presented else "no token"
        print(
            f"mftb tensorboard: refused {environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')} from {client} "
            f"({what}); later refusals of {client} are not reported",
            file=sys.stderr,
            flush=True,
        )


def _split_query(query: str) -> tuple[str, str | None]:
    """The query without its ``token`` fields (the rest byte for byte), and the last token given."""
    kept, token = [], None
    for part in query.split("&") if query else ():
        key, _, value = part.partition("=")
        if unquote_plus(key) == QUERY_KEY:
            token = unquote_plus(value)
        else:
            kept.append(part)
    return "&".join(kept), token


def _cookie_value(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value.strip('"')
    return None


def _bearer(header: str) -> str | None:
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _refuse(start_response: Callable) -> Iterable[bytes]:
    start_response(
        "401 Unauthorized",
        [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(PAGE_401))),
            ("WWW-Authenticate", REALM),
            ("Cache-Control", "no-store"),
        ],
    )
    return [PAGE_401]
