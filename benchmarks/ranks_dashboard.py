"""The ``ranks`` dashboard on a large job: a real TensorBoard serving a synthetic run of 8,192 ranks x 10,000 records.

The run is written by ``benchmarks/synthetic_ranks.py`` (the package's own writer and record format:
one float16 rank x channel matrix per aggregation interval; a straggler rank, a slow node, spikes).
TensorBoard is started from this environment as ``mftb tensorboard`` starts it (127.0.0.1, a free
port) and the plugin's routes are timed over HTTP, one request at a time:

* first load: from starting the server until ``/data/plugin/ranks/runs`` lists the run;
* ``matrix`` with its default parameters, with a few ``max_ranks`` / ``max_steps`` choices and on another
  channel; then ``stragglers`` and ``rank`` (the planted straggler);
* each response's bytes (the JSON, and as sent to a client that accepts gzip, as browsers do) and
  time; a request is timed twice, the first and a repeat (once with --quick);
* the resident memory (RSS) of the TensorBoard process and its children after the first load and after
  the requests.

python -m benchmarks.ranks_dashboard [--quick] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlencode

from benchmarks import synthetic_ranks
from mindformers_tbplugin.pipeline.rank_records import intervals_per_record
from mindformers_tbplugin.viewer import tensorboard_server

FULL = (8192, 10_000)
QUICK = (1024, 1000)
ROUTE = "/data/plugin/ranks"
LOAD_TIMEOUT_S = 1800.0
RECORD_BUDGET = 1024  # TensorBoardMonitor's rank_record_budget default, bytes per training step
AGGREGATE_EVERY = 10  # TensorBoardMonitor's aggregate_every default


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


@dataclass
class Measurement:
    ranks: int
    records: int
    file_bytes: int
    generate_s: float
    plugin_listed: bool = False
    first_load_s: float | None = None
    rss_loaded_mb: float = 0.0
    rss_after_mb: float = 0.0
    requests: list[Request] = field(default_factory=list)
    note: str = ""
    straggler: str = ""  # where the planted anomalies are in the stragglers answer


def _get(port: int, path: str, timeout: float = 600.0) -> tuple[int, bytes, int]:
    """Status, body and the bytes sent: asked as a browser asks (gzip accepted), the body unzipped."""
    url = f"http://{tensorboard_server.LOOPBACK}:{port}{path}"
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status, sent, zipped = answer.status, answer.read(), answer.headers.get("Content-Encoding") == "gzip"
    except urllib.error.HTTPError as error:
        status, sent, zipped = error.code, error.read(), error.headers.get("Content-Encoding") == "gzip"
    return status, gzip.decompress(sent) if zipped else sent, len(sent)


def _tree_rss_mb(pid: int) -> float:
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


def _queries(run: str, ranks: int, records: int, straggler: int) -> list[tuple[str, str]]:
    def matrix(**params: object) -> str:
        return f"{ROUTE}/matrix?" + urlencode({"run": run, **params})

    choices = [(64, 128), (1024, 1024), (2048, 2048)] if ranks * records > 10_000_000 else [(64, 128), (1024, 1000)]
    queries = [("matrix, default parameters", matrix(channel="step_time_ms"))]
    for max_ranks, max_steps in choices:
        queries.append(
            (
                f"matrix, max_ranks={max_ranks} max_steps={max_steps}",
                matrix(channel="step_time_ms", max_ranks=max_ranks, max_steps=max_steps),
            )
        )
    queries.append(("matrix, channel host_rss_gb, default", matrix(channel="host_rss_gb")))
    queries.append(("stragglers", f"{ROUTE}/stragglers?" + urlencode({"run": run})))
    queries.append((f"rank (rank {straggler})", f"{ROUTE}/rank?" + urlencode({"run": run, "rank": straggler})))
    return queries


def _planted(answer: dict, made: synthetic_ranks.SyntheticRanks) -> str:
    """Where the planted straggler rank and the slow node's ranks are in the stragglers answer."""
    entries = answer.get("ranks", []) if isinstance(answer, dict) else []
    listed = [entry.get("rank") for entry in entries if isinstance(entry, dict)]
    where = (
        f"listed {listed.index(made.straggler_rank) + 1} of {len(listed)}"
        if made.straggler_rank in listed
        else "not listed"
    )
    node = range(made.slow_node * synthetic_ranks.RANKS_PER_NODE, (made.slow_node + 1) * synthetic_ranks.RANKS_PER_NODE)
    since = made.step_of(made.straggler_from_record)
    return (
        f"the planted straggler (rank {made.straggler_rank}, slow from step {since}) "
        f"is {where}; {sum(rank in node for rank in listed)} of the slow node's 8 ranks are listed"
    )


def measure(ranks: int, records: int, keep: Path | None = None, repeat: bool = True) -> Measurement:
    """Generate the run, serve it, time the routes; ``repeat``: send each request a second time."""
    with tempfile.TemporaryDirectory(prefix="mftb-ranks-") as scratch:
        logdir = keep if keep is not None else Path(scratch)
        made = synthetic_ranks.generate(logdir, ranks, records)
        result = Measurement(ranks, records, made.file_bytes, made.seconds)
        run = made.run_dir.name
        port = tensorboard_server.any_free_port()
        argv = tensorboard_server.tensorboard_argv(logdir, port)
        started = time.perf_counter()
        log = Path(scratch) / "tensorboard.log"
        with log.open("w") as output:
            process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
        try:
            if not tensorboard_server.wait_until_serving(process, port, timeout=300.0):
                result.note = "TensorBoard did not start: " + log.read_text(errors="replace")[-300:]
                return result
            listing = tensorboard_server.get_json(port, "/data/plugins_listing", timeout=60.0) or {}
            result.plugin_listed = "ranks" in listing
            deadline = time.monotonic() + LOAD_TIMEOUT_S
            while time.monotonic() < deadline and process.poll() is None:
                status, body, _ = _get(port, f"{ROUTE}/runs", timeout=60.0)
                if status == 404 and not result.plugin_listed:
                    result.note = "the ranks plugin is not installed in this environment (404 on its routes)"
                    return result
                if status == 200 and run.encode() in body:
                    result.first_load_s = time.perf_counter() - started
                    break
                time.sleep(0.1)
            else:
                result.note = f"the run was not listed within {LOAD_TIMEOUT_S:.0f} s"
                return result
            result.rss_loaded_mb = _tree_rss_mb(process.pid)
            for label, path in _queries(run, ranks, records, made.straggler_rank):
                request = Request(label, path)
                for attempt in range(2 if repeat else 1):
                    began = time.perf_counter()
                    try:
                        request.status, body, sent = _get(port, path)
                    except OSError as error:  # a timeout or a dropped connection
                        request.error = str(error)
                        break
                    elapsed = (time.perf_counter() - began) * 1000
                    if attempt == 0:
                        request.first_ms, request.bytes, request.sent = elapsed, len(body), sent
                    else:
                        request.repeat_ms = elapsed
                if request.status != 200 and not request.error:
                    request.error = f"HTTP {request.status}: {body[:200].decode(errors='replace')}"
                elif label == "stragglers":
                    result.straggler = _planted(json.loads(body), made)
                result.requests.append(request)
            result.rss_after_mb = _tree_rss_mb(process.pid)
        finally:
            tensorboard_server.stop(process)
        return result


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:,.1f} kB"


def markdown_section(quick: bool, keep: Path | None = None) -> tuple[str, list[str]]:
    ranks, records = QUICK if quick else FULL
    result = measure(ranks, records, keep, repeat=not quick)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m benchmarks.ranks_dashboard" + (" --quick" if quick else "")
    every = intervals_per_record(ranks, AGGREGATE_EVERY, RECORD_BUDGET)
    per, steps = ("interval" if every == 1 else f"{every} intervals"), records * every * AGGREGATE_EVERY
    lines = [
        f"## The ranks dashboard: {ranks:,} ranks x {records:,} records in a real TensorBoard",
        "",
        f"A synthetic run written by `benchmarks/synthetic_ranks.py` through RunWriter ({ranks:,} x 4 float16 per "
        f"record, nodes of 8 ranks, one straggler rank, one slow node, spikes): **{_size(result.file_bytes)}**, "
        f"generated and written in **{result.generate_s:.1f} s**. TensorBoard started as `mftb tensorboard` starts "
        "it (127.0.0.1, default reload flags); requests one at a time"
        + (", each sent once." if quick else ", each sent twice (first, repeat)."),
        "",
        f"Command: `{command}`; {stamp}; machine: {_machine()}.",
        "",
        f"With the defaults (aggregate_every {AGGREGATE_EVERY}, rank_record_budget {RECORD_BUDGET}) a job of "
        f"{ranks:,} ranks writes one record per {per}, so {records:,} records are {steps:,} training steps.",
        "",
    ]
    if result.first_load_s is None:
        lines += [f"Not measured: {result.note}.", ""]
        return "\n".join(lines), []
    lines += [
        f"First load (server start until `runs` lists the run): **{result.first_load_s:.1f} s**. "
        f"TensorBoard RSS (with child processes): {result.rss_loaded_mb:,.0f} MB after the first load, "
        f"{result.rss_after_mb:,.0f} MB after the requests.",
        "",
        "| request | JSON | sent (gzip) | first ms | repeat ms |",
        "|---|---:|---:|---:|---:|",
    ]
    missed = []
    for request in result.requests:
        if request.error:
            lines.append(f"| {request.label} | {request.error[:80]} | - | {request.first_ms:.0f} | - |")
            missed.append(f"ranks dashboard: {request.label}: {request.error[:120]}")
        else:
            again = f"{request.repeat_ms:,.0f}" if request.repeat_ms else "-"
            sizes = f"{_size(request.bytes)} | {_size(request.sent)}"
            lines.append(f"| {request.label} | {sizes} | {request.first_ms:,.0f} | {again} |")
    lines.append("")
    if result.straggler:
        lines += [f"`stragglers`: {result.straggler}.", ""]
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ranks_dashboard", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK[0]:,} ranks x {QUICK[1]:,} records")
    parser.add_argument("--keep", type=Path, help="write the run into this log directory and keep it")
    args = parser.parse_args(argv)
    text, missed = markdown_section(args.quick, args.keep)
    print(text)
    for message in missed:
        print(f"MISSED: {message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
