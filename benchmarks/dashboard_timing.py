"""A plugin's routes timed in a real TensorBoard (shared by the ranks and moe dashboard benchmarks).

TensorBoard is started from this environment as ``mftb tensorboard`` starts it (127.0.0.1, a free port);
the first load is the time from starting the server until the plugin's ``runs`` route lists the run;
then each request is sent one at a time, as a browser asks (gzip accepted), and its JSON bytes, bytes
sent and time are kept, and the resident memory (RSS) of the TensorBoard process and its children.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mindformers_tbplugin.viewer import tensorboard_server

LOAD_TIMEOUT_S = 1800.0


@dataclass
class Request:
    label: str
    path: str
    status: int = 0
    bytes: int = 0  # the JSON
    sent: int = 0  # on the wire (TensorBoard gzips JSON for clients that accept it)
    first_ms: float = 0.0
    repeat_ms: float = 0.0
    error: str = ""
    body: bytes = b""  # the first answer, for checks of what it says


@dataclass
class Served:
    plugin_listed: bool = False
    first_load_s: float | None = None
    rss_loaded_mb: float = 0.0
    rss_after_mb: float = 0.0
    requests: list[Request] = field(default_factory=list)
    note: str = ""


def get(port: int, path: str, timeout: float = 600.0) -> tuple[int, bytes, int]:
    """Status, body and the bytes sent: asked as a browser asks (gzip accepted), the body unzipped."""
    url = f"http://{tensorboard_server.LOOPBACK}:{port}{path}"
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status, sent, zipped = answer.status, answer.read(), answer.headers.get("Content-Encoding") == "gzip"
    except urllib.error.HTTPError as error:
        status, sent, zipped = error.code, error.read(), error.headers.get("Content-Encoding") == "gzip"
    return status, gzip.decompress(sent) if zipped else sent, len(sent)


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants (the data server TensorBoard may start), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    total_kb, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        total_kb += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total_kb / 1024


def _time(port: int, label: str, path: str, repeat: bool) -> Request:
    request = Request(label, path)
    body = b""
    for attempt in range(2 if repeat else 1):
        began = time.perf_counter()
        try:
            request.status, body, sent = get(port, path)
        except OSError as error:  # a timeout or a dropped connection
            request.error = str(error)
            break
        elapsed = (time.perf_counter() - began) * 1000
        if attempt == 0:
            request.first_ms, request.bytes, request.sent, request.body = elapsed, len(body), sent, body
        else:
            request.repeat_ms = elapsed
    if request.status != 200 and not request.error:
        request.error = f"HTTP {request.status}: {body[:200].decode(errors='replace')}"
    return request


def serve_and_time(
    logdir: Path, plugin: str, run: str, queries: list[tuple[str, str]], scratch: Path, repeat: bool = True
) -> Served:
    """Serve ``logdir``, wait until ``/data/plugin/<plugin>/runs`` lists ``run``, then time ``queries``
    ((label, path) pairs); ``repeat``: send each request a second time."""
    served = Served()
    route = f"/data/plugin/{plugin}"
    port = tensorboard_server.any_free_port()
    argv = tensorboard_server.tensorboard_argv(logdir, port)
    started = time.perf_counter()
    log = scratch / "tensorboard.log"
    with log.open("w") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
    try:
        if not tensorboard_server.wait_until_serving(process, port, timeout=300.0):
            served.note = "TensorBoard did not start: " + log.read_text(errors="replace")[-300:]
            return served
        listing = tensorboard_server.get_json(port, "/data/plugins_listing", timeout=60.0) or {}
        served.plugin_listed = plugin in listing
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            status, body, _ = get(port, f"{route}/runs", timeout=60.0)
            if status == 404 and not served.plugin_listed:
                served.note = f"the {plugin} plugin is not installed in this environment (404 on its routes)"
                return served
            if status == 200 and run.encode() in body:
                served.first_load_s = time.perf_counter() - started
                break
            time.sleep(0.1)
        else:
            served.note = f"the run was not listed within {LOAD_TIMEOUT_S:.0f} s"
            return served
        served.rss_loaded_mb = tree_rss_mb(process.pid)
        served.requests = [_time(port, label, path, repeat) for label, path in queries]
        served.rss_after_mb = tree_rss_mb(process.pid)
    finally:
        tensorboard_server.stop(process)
    return served


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def size(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:,.1f} kB"


def results(served: Served, dashboard: str) -> tuple[list[str], list[str]]:
    """The first load, RSS and requests table as markdown lines, and the requests that failed."""
    lines = [
        f"First load (server start until `runs` lists the run): **{served.first_load_s:.1f} s**. "
        f"TensorBoard RSS (with child processes): {served.rss_loaded_mb:,.0f} MB after the first load, "
        f"{served.rss_after_mb:,.0f} MB after the requests.",
        "",
        "| request | JSON | sent (gzip) | first ms | repeat ms |",
        "|---|---:|---:|---:|---:|",
    ]
    missed = []
    for request in served.requests:
        if request.error:
            lines.append(f"| {request.label} | {request.error[:80]} | - | {request.first_ms:.0f} | - |")
            missed.append(f"{dashboard}: {request.label}: {request.error[:120]}")
        else:
            again = f"{request.repeat_ms:,.0f}" if request.repeat_ms else "-"
            sizes = f"{size(request.bytes)} | {size(request.sent)}"
            lines.append(f"| {request.label} | {sizes} | {request.first_ms:,.0f} | {again} |")
    lines.append("")
    return lines, missed


Section = Callable[[bool, Path | None], tuple[str, list[str]]]  # markdown_section(quick, keep) -> (text, missed)


def main(argv: list[str] | None, prog: str, doc: str, quick: str, section: Section) -> int:
    """A dashboard benchmark's command line: ``--quick`` (``quick`` says what it measures) and ``--keep DIR``;
    prints ``section(quick, keep)``'s markdown and what it missed."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--keep", type=Path, help="write the run into this log directory and keep it")
    args = parser.parse_args(argv)
    text, missed = section(args.quick, args.keep)
    print(text)
    for message in missed:
        print(f"MISSED: {message}")
    return 0
