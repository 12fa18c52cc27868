"""Decoding events: the package's decoder (tfevents/decode.py) against protobuf's ``Event.FromString``.

Three records as the package writes them: a step's 10 scalars, a DeepSeek-V3-size ``moe/load`` record
(2 x 59 x 256 float16) and an 8,192-rank ``ranks/matrix`` record (8,192 x 4 float16); each decoded to
what the readers use (for the tensors, the numpy array). ``Event.FromString`` runs under both of
protobuf's implementations (upb, the default; python, which MindSpore selects in any process that
imports it), each in its own process. Median µs per record over rounds.

python -m benchmarks.decode_cost [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

RECORDS = ("10 scalars", "moe/load 2 x 59 x 256", "ranks/matrix 8,192 x 4")
IMPLEMENTATIONS = ("upb", "python")


def _payloads() -> dict[str, bytes]:
    import numpy as np

    from mindformers_tbplugin.tfevents import events

    scalars = events.encode_scalars_event(7, 1.0, {f"train/tag_{i}": float(i) for i in range(10)})
    rng = np.random.default_rng(0)
    moe = events.tensor_event(7, 1.0, "moe/load", rng.random((2, 59, 256)).astype(np.float16), "moe", b"")
    ranks = events.tensor_event(7, 1.0, "ranks/matrix", rng.random((8192, 4)).astype(np.float16), "ranks", b"")
    return dict(zip(RECORDS, (scalars, moe, ranks), strict=True))


def _time(fn, payload: bytes, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn(payload)
    return (time.perf_counter() - start) / repeats * 1e6


def measure_here(repeats: int, rounds: int) -> dict[str, dict[str, float]]:
    """In this process: µs per record of each decoder."""
    import numpy as np
    from google.protobuf.internal import api_implementation
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    from mindformers_tbplugin.tfevents.decode import decode_event, tensor_array

    def ours(payload: bytes) -> None:
        for value in decode_event(payload).values:
            if value.tensor is not None:
                _, dims, content = tensor_array(value.tensor)
                np.frombuffer(content, "<f2").reshape(dims)

    def protobuf(payload: bytes) -> None:
        for value in event_pb2.Event.FromString(payload).summary.value:
            if value.HasField("tensor"):
                tensor_util.make_ndarray(value.tensor)

    found: dict[str, dict[str, float]] = {}
    name = f"Event.FromString ({api_implementation.Type()})"
    for record, payload in _payloads().items():
        found[record] = {
            "tfevents.decode": statistics.median(_time(ours, payload, repeats) for _ in range(rounds)),
            name: statistics.median(_time(protobuf, payload, repeats) for _ in range(rounds)),
        }
    return found


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    repeats, rounds = (200, 3) if quick else (2000, 5)
    results: dict[str, dict[str, float]] = {record: {} for record in RECORDS}
    for implementation in IMPLEMENTATIONS:
        env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": implementation}
        argv = [sys.executable, "-m", "benchmarks.decode_cost", "--child", str(repeats), str(rounds)]
        output = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
        for record, timings in json.loads(output.splitlines()[-1]).items():
            results[record].update(timings)
    columns = ["tfevents.decode", *(f"Event.FromString ({name})" for name in IMPLEMENTATIONS)]
    lines = [
        "## Decoding events: tfevents/decode.py against Event.FromString",
        "",
        f"`python -m benchmarks.decode_cost`: median µs per record over {rounds} rounds of {repeats}, each record "
        "decoded to what the readers use (tensors to numpy arrays); protobuf's implementations each in a process "
        "of its own. The package's decoder serves `mftb watch` (beside its faster path for the layout repeated "
        "every step), `mftb doctor` and the ranks and moe dashboards, whichever implementation the process has "
        "(MindSpore switches any process that imports it to the python one).",
        "",
        "| record | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for record in RECORDS:
        row = results[record]
        cells = [f"{row[column]:.1f}" if column in row else "n/a" for column in columns]
        lines.append(f"| {record} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "One decoder is kept, the package's: the same fields whichever protobuf implementation a process has. Where "
        "upb is active, `Event.FromString` is faster per record, but no reader spends its time there: `mftb watch` "
        "reads the layout every step repeats without decoding (a byte template), and the dashboards decode each "
        "record once, on arrival (10,000 DeepSeek-V3-size moe records: a fraction of a second of a first load of "
        "seconds, see the moe dashboard section).",
        "",
    ]
    return "\n".join(lines), []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=2, type=int, metavar=("REPEATS", "ROUNDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_here(*args.child)))
        return
    print(markdown_section(args.quick)[0])


if __name__ == "__main__":
    main()
