"""`mftb runs` and the runs dashboard's route over a generated root of 10,000 runs.

python -m benchmarks.runs_listing [--quick] [--keep DIR]

The root holds 200 job folders of 50 runs each; every run folder holds a status record as the monitor
writes it (pipeline/status_record.py), a small event file, and, one run in ten, eight ``rank_<id>``
folders (a multi-rank job's per-rank runs). States are mixed (running, finished, failed, stopped by alert;
some running records are old enough to be stale). Timed warm (the tree was just written and listed once):
`mftb runs ROOT` and `mftb runs ROOT --json` as processes (interpreter start included), the listing
in-process, and the dashboard's `/data/plugin/runs/table` route in a real TensorBoard.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import dashboard_timing
from mindformers_tbplugin.pipeline import status_record
from mindformers_tbplugin.pipeline.status_record import StatusRecord
from mindformers_tbplugin.tfevents.events import encode_scalars_event
from mindformers_tbplugin.tfevents.records import frame_record
from mindformers_tbplugin.viewer import runs_table, tensorboard_server

FULL, QUICK = 10_000, 1_000
RUNS_PER_JOB = 50
TARGET_S = 2.0
ENTRY_POINT = "runs = mindformers_tbplugin.viewer.runs_plugin:RunsPlugin"


def generate(root: Path, count: int, now: float | None = None, seed: int = 0) -> None:
    """``count`` runs under ``root`` (see the module's docstring)."""
    now = time.time() if now is None else now
    chance = random.Random(seed)
    states = [status_record.RUNNING] * 3 + [status_record.FINISHED] * 4 + [status_record.FAILED, status_record.STOPPED]
    for index in range(count):
        job, experiment = f"job_{index // RUNS_PER_JOB:04d}", f"exp{index % 7}"
        started = now - chance.uniform(600, 30 * 86400)
        run_dir = root / job / "tensorboard" / f"{experiment}_{datetime.fromtimestamp(started):%Y%m%d-%H%M%S}-{index}"
        run_dir.mkdir(parents=True)
        state = chance.choice(states)
        updated = now - chance.uniform(1, 30) if state == status_record.RUNNING else started + 3600
        if state == status_record.RUNNING and index % 10 == 0:
            updated = now - 3600  # stale
        step, ranks = chance.randint(1, 100_000), 8 if index % 10 == 3 else 1
        event = encode_scalars_event(step, updated, {"train/loss": 2.0})
        (run_dir / f"events.out.tfevents.{int(started)}.node{index % 64}.{index}.0").write_bytes(frame_record(event))
        for rank in range(ranks if ranks > 1 else 0):
            (run_dir / f"rank_{rank}").mkdir()
        record = StatusRecord(
            experiment=experiment,
            run=run_dir.name,
            owner=f"user{index % 13}",
            hosts=[f"node{index % 64}"],
            host_count=1,
            world_size=ranks,
            started=started,
            updated=updated,
            progressed=updated,
            state=state,
            step=step,
            total_steps=100_000,
            loss=chance.uniform(1.5, 3.0),
            tokens_per_s_per_device=chance.uniform(1000, 5000),
            mfu=chance.uniform(0.2, 0.5),
            alerts=chance.choice([0, 0, 0, 1, 3]),
        )
        status_record.write(run_dir, record)


def generate_without_records(root: Path, count: int, steps: int = 2000) -> None:
    """``count`` runs as an older release wrote them: no status record, one event file of ``steps`` steps."""
    events = (encode_scalars_event(s, 1.7e9 + s, {"train/loss": 2.0, "train/lr": 1e-4}) for s in range(1, steps + 1))
    blob = b"".join(map(frame_record, events))
    for index in range(count):
        run_dir = root / f"job_{index // RUNS_PER_JOB:04d}" / f"llama_20261201-1010{index % 60:02d}-{index}"
        run_dir.mkdir(parents=True)
        (run_dir / f"events.out.tfevents.1700000000.node{index % 8}.{index}.0").write_bytes(blob)


def entry_point_shim(folder: Path) -> dict[str, str]:
    """Environment variables that make a child TensorBoard find the ``runs`` plugin when this
    environment's installed metadata predates its entry point (an editable install made before it):
    a dist-info folder declaring it, first on PYTHONPATH. Empty when the entry point is installed."""
    from importlib import metadata

    if any(point.name == "runs" for point in metadata.entry_points(group="tensorboard_plugins")):
        return {}
    info = folder / "mftb_runs_plugin-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mftb-runs-plugin\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[tensorboard_plugins]\n{ENTRY_POINT}\n")
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), inherited) if p)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _mftb(*args: str) -> tuple[float, float]:
    """Wall and CPU seconds of one ``mftb runs`` process."""
    mftb = str(Path(sys.executable).parent / "mftb")
    began, cpu = time.perf_counter(), _children_cpu()
    subprocess.run([mftb, "runs", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began, _children_cpu() - cpu


def _median_pair(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def _route(root: Path, scratch: Path, tries: int) -> tuple[list[float], int, str]:
    """Times of the table route in a real TensorBoard, its JSON size, and what went wrong (empty: nothing)."""
    port = tensorboard_server.any_free_port()
    env = {**os.environ, **entry_point_shim(scratch / "shim")}
    with (scratch / "tensorboard.log").open("w") as log:
        process = subprocess.Popen(tensorboard_server.tensorboard_argv(root, port), stdout=log, stderr=log, env=env)
    try:
        if not tensorboard_server.wait_until_serving(process, port, timeout=300.0):
            return [], 0, "TensorBoard did not start"
        times, size = [], 0
        for _ in range(tries):
            began = time.perf_counter()
            status, body, _ = dashboard_timing.get(port, "/data/plugin/runs/table")
            times.append(time.perf_counter() - began)
            if status != 200:
                return [], 0, f"HTTP {status}: {body[:200].decode(errors='replace')}"
            size = len(body)
        return times, size, ""
    finally:
        tensorboard_server.stop(process)


def measure(count: int, keep: Path | None = None, tries: int = 3) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="mftb-runs-bench-"))
    root = keep or scratch / "root"
    try:
        return _measure(root, scratch, count, tries)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _measure(root: Path, scratch: Path, count: int, tries: int) -> dict:
    began = time.perf_counter()
    generate(root, count)
    result = {"count": count, "generate_s": time.perf_counter() - began}
    runs_table.list_runs(root, status_record.DEFAULT_STALE_AFTER_SECS)  # warm the file system's caches
    inside = []
    for _ in range(tries):
        began, cpu = time.perf_counter(), time.process_time()
        rows = runs_table.list_runs(root, status_record.DEFAULT_STALE_AFTER_SECS)
        inside.append((time.perf_counter() - began, time.process_time() - cpu))
    result["listed"] = len(rows)
    result["in_process"] = _median_pair(inside)
    result["cli"] = _median_pair([_mftb(str(root)) for _ in range(tries)])
    result["cli_json"] = _median_pair([_mftb(str(root), "--json") for _ in range(tries)])
    result["load"] = os.getloadavg()[0]
    older = scratch / "older"
    generate_without_records(older, count // 10)
    runs_table.list_runs(older, status_record.DEFAULT_STALE_AFTER_SECS)
    began, cpu = time.perf_counter(), time.process_time()
    result["older_listed"] = len(runs_table.list_runs(older, status_record.DEFAULT_STALE_AFTER_SECS))
    result["older"] = (time.perf_counter() - began, time.process_time() - cpu)
    result["route_s"], result["route_bytes"], result["route_note"] = _route(root, scratch, tries)
    return result


def markdown_section(quick: bool, keep: Path | None = None) -> tuple[str, list[str]]:
    count = QUICK if quick else FULL
    result = measure(count, keep)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m benchmarks.runs_listing" + (" --quick" if quick else "")
    route = result["route_s"]
    lines = [
        f"## mftb runs and the runs dashboard: {count:,} runs",
        "",
        f"A root written by `benchmarks/runs_listing.py`: {count // RUNS_PER_JOB:,} job folders of {RUNS_PER_JOB} "
        "runs, each with its status record and an event file, one in ten with 8 `rank_<id>` folders; generated in "
        f"{result['generate_s']:.1f} s. Warm file system (written, then listed once); medians of 3. Wall time, and "
        "the CPU time of the listing process (wall time grows with whatever else the machine runs: the load "
        f"average was {result['load']:.1f} on {os.cpu_count()} cores).",
        "",
        f"Command: `{command}`; {stamp}; machine: {dashboard_timing.machine()}.",
        "",
        "| what | wall s | CPU s |",
        "|---|---:|---:|",
        "| `mftb runs ROOT` (a process: interpreter start, listing, table printed) | {:.2f} | {:.2f} |".format(
            *result["cli"]
        ),
        "| `mftb runs ROOT --json` | {:.2f} | {:.2f} |".format(*result["cli_json"]),
        "| the listing in-process (`viewer/runs_table.list_runs`, {:,} rows) | {:.2f} | {:.2f} |".format(
            result["listed"], *result["in_process"]
        ),
        "| the listing in-process, {:,} runs of an older release (no status record; 2,000 steps each: the "
        "newest event file's tail) | {:.2f} | {:.2f} |".format(result["older_listed"], *result["older"]),
    ]
    if route:
        size = dashboard_timing.size(result["route_bytes"])
        lines.append(
            f"| `/data/plugin/runs/table` in a real TensorBoard ({size} of JSON; first, then the median of the "
            f"others) | {route[0]:.2f}, {statistics.median(route[1:]):.2f} | - |"
        )
    else:
        lines += ["", f"The route was not measured: {result['route_note']}."]
    lines.append("")
    timed = {"mftb runs": result["cli"][0], "mftb runs --json": result["cli_json"][0]}
    if route:
        timed["the runs dashboard's route"] = statistics.median(route)
    missed = [f"{name} over {count:,} runs: {s:.2f} s > {TARGET_S} s" for name, s in timed.items() if s > TARGET_S]
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> int:
    quick = f"{QUICK:,} runs instead of {FULL:,}"
    return dashboard_timing.main(argv, "python -m benchmarks.runs_listing", __doc__, quick, markdown_section)


if __name__ == "__main__":
    raise SystemExit(main())
