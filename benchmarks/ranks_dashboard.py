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

import json
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlencode

from benchmarks import dashboard_timing, synthetic_ranks
from benchmarks.dashboard_timing import Served, machine, results, serve_and_time, size
from mindformers_tbplugin.pipeline.rank_records import intervals_per_record

FULL = (8192, 10_000)
QUICK = (1024, 1000)
ROUTE = "/data/plugin/ranks"
RECORD_BUDGET = 1024  # TensorBoardMonitor's rank_record_budget default, bytes per training step
AGGREGATE_EVERY = 10  # TensorBoardMonitor's aggregate_every default


@dataclass
class Measurement:
    ranks: int
    records: int
    file_bytes: int
    generate_s: float
    served: Served = field(default_factory=Served)
    straggler: str = ""  # where the planted anomalies are in the stragglers answer


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
        queries = _queries(made.run_dir.name, ranks, records, made.straggler_rank)
        result.served = serve_and_time(logdir, "ranks", made.run_dir.name, queries, Path(scratch), repeat)
        for request in result.served.requests:
            if request.label == "stragglers" and not request.error:
                result.straggler = _planted(json.loads(request.body), made)
        return result


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
        f"record, nodes of 8 ranks, one straggler rank, one slow node, spikes): **{size(result.file_bytes)}**, "
        f"generated and written in **{result.generate_s:.1f} s**. TensorBoard started as `mftb tensorboard` starts "
        "it (127.0.0.1, default reload flags); requests one at a time"
        + (", each sent once." if quick else ", each sent twice (first, repeat)."),
        "",
        f"Command: `{command}`; {stamp}; machine: {machine()}.",
        "",
        f"With the defaults (aggregate_every {AGGREGATE_EVERY}, rank_record_budget {RECORD_BUDGET}) a job of "
        f"{ranks:,} ranks writes one record per {per}, so {records:,} records are {steps:,} training steps.",
        "",
    ]
    if result.served.first_load_s is None:
        lines += [f"Not measured: {result.served.note}.", ""]
        return "\n".join(lines), []
    timed, missed = results(result.served, "ranks dashboard")
    lines += timed
    if result.straggler:
        lines += [f"`stragglers`: {result.straggler}.", ""]
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> int:
    quick = f"{QUICK[0]:,} ranks x {QUICK[1]:,} records"
    return dashboard_timing.main(argv, "python -m benchmarks.ranks_dashboard", __doc__, quick, markdown_section)


if __name__ == "__main__":
    raise SystemExit(main())
