"""Writer-thread cost of encoding one step's 10 scalars: protobuf objects vs the direct wire encoder.

Measured in child processes, one per protobuf implementation: ``python`` is what every training
process runs (MindSpore sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` on import), ``upb``
is protobuf's C implementation. The writer thread holds the GIL while it encodes, so this time is
taken from the training thread too. Variants alternate round by round inside each child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CHILD = """
import json, statistics, sys, time
from google.protobuf.internal import api_implementation
from mindformers_tbplugin.tfevents.events import encode_scalars_event, scalars_event
events, rounds = int(sys.argv[1]), int(sys.argv[2])
values = {f"bench/metric_{i}": 0.001 * i for i in range(10)}
variants = {
    "protobuf Event(...).SerializeToString()": lambda s: scalars_event(s, 1.7e9 + s, values).SerializeToString(),
    "encode_scalars_event (wire format)": lambda s: encode_scalars_event(s, 1.7e9 + s, values),
}
rows = {name: [] for name in variants}
for round_index in range(rounds):
    for name, encode in (list(variants.items())[:: -1 if round_index % 2 else 1]):
        start = time.perf_counter()
        for step in range(events):
            encode(step)
        rows[name].append((time.perf_counter() - start) / events * 1e6)
print(json.dumps({"implementation": api_implementation.Type(), "rows": rows}))
"""


def measure(implementation: str, events: int, rounds: int) -> dict:
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=implementation)
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(events), str(rounds)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    events, rounds = (2_000, 3) if quick else (20_000, 5)
    lines = [
        "## Writer thread: encoding one step's 10 scalars",
        "",
        f"{events} events per round, {rounds} rounds alternating; µs per event, median (min-max) over rounds.",
        "",
        "| protobuf implementation | encoder | median µs/event | min-max | ratio protobuf / direct |",
        "|---|---|---|---|---|",
    ]
    missed = []
    for implementation in ("python", "upb"):
        found = measure(implementation, events, rounds)
        medians = {name: sorted(times)[len(times) // 2] for name, times in found["rows"].items()}
        proto, direct = medians.values()
        for name, times in found["rows"].items():
            ratio = f"**{proto / direct:.1f}x**" if medians[name] == direct else ""
            lines.append(
                f"| {found['implementation']} | {name} | {medians[name]:.2f} | {min(times):.2f}-{max(times):.2f} "
                f"| {ratio} |"
            )
        if direct >= proto:
            missed.append(f"direct scalar encoding is not faster than protobuf ({implementation})")
    lines += [
        "",
        "Training processes run the pure-Python implementation: the writer uses the direct encoder for scalar "
        "events (byte-identical output, tests/tfevents/test_events.py) and protobuf for the rare other "
        "records.",
        "",
    ]
    return "\n".join(lines), missed
