"""Writer-thread cost of encoding a record: protobuf objects vs the direct wire encoders.

Two records: one step's 10 scalars (written every logged step) and a DeepSeek-V3-size ``moe/load``
tensor record (2 x 59 x 256 float16, every record of the moe dashboard; the ranks dashboard's records
are encoded the same way). Measured in child processes, one per protobuf implementation: ``python`` is
what every training process runs (MindSpore sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` on
import), ``upb`` is protobuf's C implementation. The writer thread holds the GIL while it encodes, so
this time is taken from the training thread too. Variants alternate round by round inside each child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CHILD = """
import json, statistics, sys, time
import numpy as np
from google.protobuf.internal import api_implementation
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from mindformers_tbplugin.tfevents.events import encode_scalars_event, scalars_event, tensor_event
events, rounds = int(sys.argv[1]), int(sys.argv[2])
values = {f"bench/metric_{i}": 0.001 * i for i in range(10)}
load = np.random.default_rng(0).random((2, 59, 256)).astype(np.float16)

def tensor_by_protobuf(step):
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n) for n in load.shape])
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, tensor_shape=shape, tensor_content=load.tobytes())
    plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="moe", content=b"")
    metadata = summary_pb2.SummaryMetadata(plugin_data=plugin, data_class=summary_pb2.DATA_CLASS_TENSOR)
    value = summary_pb2.Summary.Value(tag="moe/load", metadata=metadata, tensor=tensor)
    event = event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[value]))
    return event.SerializeToString()

PROTOBUF, MOE = "protobuf Event(...).SerializeToString()", "moe/load 2 x 59 x 256"
variants = {
    ("10 scalars", PROTOBUF): lambda s: scalars_event(s, 1.7e9 + s, values).SerializeToString(),
    ("10 scalars", "encode_scalars_event (wire format)"): lambda s: encode_scalars_event(s, 1.7e9 + s, values),
    (MOE, PROTOBUF): tensor_by_protobuf,
    (MOE, "tensor_event (wire format)"): lambda s: tensor_event(s, 1.7e9 + s, "moe/load", load, "moe", b""),
}
rows = {" | ".join(name): [] for name in variants}
for round_index in range(rounds):
    for name, encode in (list(variants.items())[:: -1 if round_index % 2 else 1]):
        start = time.perf_counter()
        for step in range(events):
            encode(step)
        rows[" | ".join(name)].append((time.perf_counter() - start) / events * 1e6)
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
        "## Writer thread: encoding a record",
        "",
        f"{events} events per round, {rounds} rounds alternating; µs per event, median (min-max) over rounds.",
        "",
        "| protobuf implementation | record | encoder | median µs/event | min-max | ratio protobuf / direct |",
        "|---|---|---|---|---|---|",
    ]
    missed = []
    for implementation in ("python", "upb"):
        found = measure(implementation, events, rounds)
        names = list(found["rows"])
        medians = {name: sorted(times)[len(times) // 2] for name, times in found["rows"].items()}
        for proto_name, direct_name in zip(names[::2], names[1::2], strict=True):  # (protobuf, direct) per record
            proto, direct = medians[proto_name], medians[direct_name]
            for name in (proto_name, direct_name):
                times = found["rows"][name]
                ratio = f"**{proto / direct:.1f}x**" if name == direct_name else ""
                lines.append(
                    f"| {found['implementation']} | {name} | {medians[name]:.2f} | {min(times):.2f}-{max(times):.2f} "
                    f"| {ratio} |"
                )
            if direct >= proto:
                missed.append(
                    f"direct encoding of {proto_name.split(' | ')[0]} is not faster than protobuf ({implementation})"
                )
    lines += [
        "",
        "Training processes run the pure-Python implementation: the writer uses the direct encoders for scalar "
        "events and the dashboards' tensor records (byte-identical output, tests/tfevents/test_events.py) and "
        "protobuf for the rare other records (text, histograms, HParams, the graph).",
        "",
    ]
    return "\n".join(lines), missed
