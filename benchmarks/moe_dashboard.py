"""The ``moe`` dashboard at DeepSeek-V3's size in a real TensorBoard: 59 MoE layers x 256 experts x 10,000 records.

The run is written by ``benchmarks/synthetic_moe.py`` (the package's own writer and record format: one
float16 (load, bias) x layer x expert array per record; a planted layer where two experts die and one
takes a growing share). TensorBoard is started from this environment as ``mftb tensorboard`` starts it
(127.0.0.1, a free port) and the plugin's routes are timed over HTTP, one request at a time
(``benchmarks/dashboard_timing.py``):

* first load: from starting the server until ``/data/plugin/moe/runs`` lists the run;
* ``record`` (the latest, one in the middle, and the worst of a strip block for the planted layer, as a
  click on the strip asks), ``strip`` (the default, and as many columns as a wide page asks), ``worst``;
* stepping through 20 consecutive records as the play button does (``record`` + ``worst`` per step);
* each response's bytes (the JSON, and as sent to a client that accepts gzip, as browsers do) and time;
  a request is timed twice, the first and a repeat (once with --quick);
* the resident memory (RSS) of the TensorBoard process and its children after the first load and after
  the requests.

python -m benchmarks.moe_dashboard [--quick] [--keep DIR]
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlencode

from benchmarks import dashboard_timing, synthetic_moe
from benchmarks.dashboard_timing import Request, Served, machine, results, serve_and_time, size

FULL = (59, 256, 10_000)
QUICK = (59, 256, 2_000)
ROUTE = "/data/plugin/moe"
PLAY_STEPS = 20
PLAY = "play"  # the label of the stepping requests, summarised in one line rather than the table


@dataclass
class Measurement:
    layers: int
    experts: int
    records: int
    file_bytes: int
    generate_s: float
    steps_per_record: int
    served: Served = field(default_factory=Served)
    planted: str = ""  # what the worst answer says of the planted layer


def _queries(made: synthetic_moe.SyntheticMoe) -> list[tuple[str, str]]:
    run = made.run_dir.name

    def ask(route: str, **params: object) -> str:
        return f"{ROUTE}/{route}?" + urlencode({"run": run, **params})

    middle = made.step_of(made.records // 2)
    block = made.records // 512 + 1  # the default strip's records per column, about
    first, last = made.step_of(made.records * 3 // 4), made.step_of(made.records * 3 // 4 + block - 1)
    queries = [
        ("runs", f"{ROUTE}/runs"),
        ("record, the latest", ask("record")),
        (f"record, step {middle:,}", ask("record", step=middle)),
        (
            f"record, worst of {made.planted_layer} in steps {first:,}..{last:,} (a strip click)",
            ask("record", step=first, until=last, layer=made.planted_layer),
        ),
        ("strip, default (max_steps 512)", ask("strip")),
        ("strip, max_steps 1024 (a wide page)", ask("strip", max_steps=1024)),
        ("strip, max_steps 4096", ask("strip", max_steps=4096)),
        ("worst, the latest", ask("worst")),
        (f"worst, step {middle:,}", ask("worst", step=middle)),
    ]
    for record in range(made.records // 3, made.records // 3 + PLAY_STEPS):
        step = made.step_of(record)
        queries += [(PLAY, ask("record", step=step)), (PLAY, ask("worst", step=step))]
    return queries


def _planted(answer: dict, made: synthetic_moe.SyntheticMoe) -> str:
    """Where the planted layer is in the worst answer, and what it says of its dead experts."""
    entries = answer.get("over_run", []) if isinstance(answer, dict) else []
    layers = [entry.get("layer") for entry in entries]
    if made.planted_layer not in layers:
        return f"the planted layer ({made.planted_layer}) is not listed"
    entry = entries[layers.index(made.planted_layer)]
    dead = ", ".join(f"{d['expert']} since step {d['since_step']:,}" for d in entry.get("dead_now", []))
    planted = ", ".join(map(str, sorted(made.dead_experts)))
    return (
        f"the planted layer ({made.planted_layer}, experts {planted} dead from step "
        f"{made.step_of(made.dead_from_record):,}) is listed {layers.index(made.planted_layer) + 1} of "
        f"{len(layers)} over the run, with dead experts {dead or 'none'}"
    )


def measure(layers: int, experts: int, records: int, keep: Path | None = None, repeat: bool = True) -> Measurement:
    """Generate the run, serve it, time the routes; ``repeat``: send each request a second time."""
    with tempfile.TemporaryDirectory(prefix="mftb-moe-") as scratch:
        logdir = keep if keep is not None else Path(scratch)
        made = synthetic_moe.generate(logdir, layers, experts, records)
        result = Measurement(layers, experts, records, made.file_bytes, made.seconds, made.steps_per_record)
        result.served = serve_and_time(logdir, "moe", made.run_dir.name, _queries(made), Path(scratch), repeat)
        for request in result.served.requests:
            if request.label == "worst, the latest" and not request.error:
                result.planted = _planted(json.loads(request.body), made)
        return result


def _stepping(requests: list[Request]) -> str:
    """The stepping requests as one line: per step, record + worst."""
    failed = [request for request in requests if request.error]
    if failed:
        return f"Stepping through {PLAY_STEPS} records: {len(failed)} request(s) failed: {failed[0].error[:120]}."
    per_step = [a.first_ms + b.first_ms for a, b in zip(requests[::2], requests[1::2], strict=True)]
    sent = statistics.mean(a.sent + b.sent for a, b in zip(requests[::2], requests[1::2], strict=True))
    return (
        f"Stepping through {PLAY_STEPS} consecutive records as the play button does (`record` + `worst` per step): "
        f"median **{statistics.median(per_step):,.0f} ms** per step (max {max(per_step):,.0f} ms), "
        f"{size(int(sent))} sent per step (gzip)."
    )


def markdown_section(quick: bool, keep: Path | None = None) -> tuple[str, list[str]]:
    layers, experts, records = QUICK if quick else FULL
    result = measure(layers, experts, records, keep, repeat=not quick)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m benchmarks.moe_dashboard" + (" --quick" if quick else "")
    steps = records * result.steps_per_record
    reads = result.steps_per_record // synthetic_moe.STEPS_PER_READ
    repeats = ", each sent once." if quick else ", each sent twice (first, repeat)."
    lines = [
        f"## The moe dashboard: {layers} MoE layers x {experts} experts x {records:,} records in a real TensorBoard",
        "",
        f"A synthetic run at DeepSeek-V3's size written by `benchmarks/synthetic_moe.py` through RunWriter "
        f"(58 MoE layers + 1 MTP layer x 256 routed experts, load and bias, float16; a planted layer where two "
        f"experts die and one takes a growing share): **{size(result.file_bytes)}**, generated and written in "
        f"**{result.generate_s:.1f} s**. TensorBoard started as `mftb tensorboard` starts it (127.0.0.1, default "
        "reload flags); requests one at a time" + repeats,
        "",
        f"Command: `{command}`; {stamp}; machine: {machine()}.",
        "",
        f"With the defaults (moe_every {synthetic_moe.STEPS_PER_READ}, moe_record_budget "
        f"{synthetic_moe.RECORD_BUDGET}) such a model writes one record per {result.steps_per_record} training steps "
        f"(the mean of {reads} reads), so {records:,} records are {steps:,} steps.",
        "",
    ]
    served = result.served
    if served.first_load_s is None:
        lines += [f"Not measured: {served.note}.", ""]
        return "\n".join(lines), []
    stepping = [request for request in served.requests if request.label == PLAY]
    table = Served(**{**vars(served), "requests": [r for r in served.requests if r.label != PLAY]})
    timed, missed = results(table, "moe dashboard")
    lines += [*timed, _stepping(stepping), ""]
    missed += [f"moe dashboard: stepping: {r.error[:120]}" for r in stepping if r.error][:1]
    if result.planted:
        lines += [f"`worst`: {result.planted}.", ""]
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> int:
    quick = f"{QUICK[0]} x {QUICK[1]} x {QUICK[2]:,} records"
    return dashboard_timing.main(argv, "python -m benchmarks.moe_dashboard", __doc__, quick, markdown_section)


if __name__ == "__main__":
    raise SystemExit(main())
