"""Scalar read throughput: mftb's event reader vs TensorBoard's EventAccumulator, same file.

Each reader runs in its own child process (so peak RSS is its own) over one event file written in
this package's format (10 scalars per event); both must return every point.

python -m benchmarks.watch_throughput [--points N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TAGS = 10


@dataclass(frozen=True)
class ReadResult:
    reader: str
    points: int
    seconds: float
    peak_rss_mb: float
    baseline_rss_mb: float

    @property
    def points_per_s(self) -> float:
        return self.points / self.seconds


def write_log(run_dir: Path, points: int) -> Path:
    """One event file with ``points`` scalars, 10 tags per event, noisy values."""
    from mindformers_tbplugin.tfevents.event_file import EventFile
    from mindformers_tbplugin.tfevents.events import scalars_event

    event_file = EventFile(run_dir)
    tags = [f"bench/tag_{i}" for i in range(TAGS)]
    wall = time.time() - points
    for step in range(points // TAGS):
        values = {tag: float((step * 7919 + i * 104729) % 1000) / 7.0 for i, tag in enumerate(tags)}
        event_file.write(scalars_event(step, wall + step, values))
    event_file.close()
    return event_file.path


def _peak_rss_mb() -> float:
    """Peak RSS of this process image. VmHWM, not ru_maxrss: ru_maxrss keeps the parent's peak across
    fork and exec, so a child started by a large parent would report the parent's size."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _read_mftb(path: Path) -> int:
    from mindformers_tbplugin.tfevents.reader import EventFileReader

    count = 0
    for _ in EventFileReader(path).read():
        count += 1
    return count


def _read_event_accumulator(path: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    accumulator = EventAccumulator(str(path), size_guidance={SCALARS: 0})  # keep every point
    accumulator.Reload()
    return sum(len(accumulator.Scalars(tag)) for tag in accumulator.Tags()["scalars"])


READERS = {"mftb EventFileReader": _read_mftb, "TensorBoard EventAccumulator": _read_event_accumulator}


def _child(reader: str, path: Path) -> None:
    import tensorboard.backend.event_processing.event_accumulator  # noqa: F401

    import mindformers_tbplugin.tfevents.reader  # noqa: F401  (imports are not part of the timing)

    baseline = _peak_rss_mb()
    start = time.perf_counter()
    points = READERS[reader](path)
    seconds = time.perf_counter() - start
    print(json.dumps({"points": points, "seconds": seconds, "peak": _peak_rss_mb(), "baseline": baseline}))


def measure(points: int, rounds: int = 3) -> list[ReadResult]:
    """Write one log; read it ``rounds`` times with each reader, alternating, each time in a fresh
    child process. Per reader: the median time over rounds and the largest peak RSS."""
    with tempfile.TemporaryDirectory(prefix="mftb-watch-bench-") as folder:
        path = write_log(Path(folder), points)
        # Importing MindSpore sets protobuf to pure Python for the process and its children: undo that,
        # so that EventAccumulator parses with protobuf's C implementation, as it does for users.
        env = {key: value for key, value in os.environ.items() if key != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
        runs: dict[str, list[dict]] = {reader: [] for reader in READERS}
        for _ in range(rounds):
            for reader in READERS:
                output = subprocess.run(
                    [sys.executable, "-m", "benchmarks.watch_throughput", "--child", reader, str(path)],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                ).stdout
                runs[reader].append(json.loads(output.strip().splitlines()[-1]))
    return [
        ReadResult(
            reader,
            data[0]["points"],
            statistics.median(d["seconds"] for d in data),
            max(d["peak"] for d in data),
            max(d["baseline"] for d in data),
        )
        for reader, data in runs.items()
    ]


def markdown_section(quick: bool, target_ratio: float) -> tuple[str, list[str]]:
    points = 100_000 if quick else 1_000_000
    rows = measure(points)
    ours, reference = rows
    ratio = ours.points_per_s / reference.points_per_s
    lines = [
        f"## mftb watch: reading scalars ({points:,} points, one event file, same run)",
        "",
        f"{TAGS} scalars per event, written by this package; each reader in its own process, every point read "
        "(EventAccumulator with `size_guidance={SCALARS: 0}` and protobuf's C implementation); 3 rounds, "
        "readers alternated, median time, largest peak RSS.",
        "",
        "| reader | points/s | seconds | peak RSS MB | RSS after imports MB |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.reader} | {row.points_per_s:,.0f} | {row.seconds:.2f} | {row.peak_rss_mb:.0f} | "
            f"{row.baseline_rss_mb:.0f} |"
        )
    lines += ["", f"Ratio mftb / EventAccumulator: **{ratio:.1f}x**.", ""]
    missed = [f"watch reader {ratio:.1f}x EventAccumulator < target {target_ratio}x"] if ratio < target_ratio else []
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--child", nargs=2, metavar=("READER", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], Path(args.child[1]))
        return
    for row in measure(args.points):
        print(
            f"{row.reader}: {row.points} points in {row.seconds:.2f} s = {row.points_per_s:,.0f} points/s, "
            f"peak RSS {row.peak_rss_mb:.0f} MB (after imports {row.baseline_rss_mb:.0f} MB)"
        )


if __name__ == "__main__":
    main()
