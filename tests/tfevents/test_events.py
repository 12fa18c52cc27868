"""The hand-written scalars and tensor-record encoders produce exactly protobuf's bytes, and TensorBoard reads them."""

from __future__ import annotations

import json
import math
import pickle
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import read_scalars, subprocess_env
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from mindformers_tbplugin.tfevents.events import encode_scalars_event, scalars_event, tensor_event
from mindformers_tbplugin.tfevents.writer import RunWriter

FLOAT_MAX = float.fromhex("0x1.fffffep+127")
# Values where a careless float32 narrowing goes wrong: non-finite, signed zero, beyond float32 (one
# rounds down to FLOAT_MAX, the rest become inf), subnormals and below, integers float32 cannot hold.
SPECIAL_VALUES = [
    math.nan,
    -math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    1e300,
    -1e300,
    FLOAT_MAX,
    -FLOAT_MAX,
    3.40282350e38,
    1e-45,
    1e-50,
    5e-324,
    2.0**24 + 1,
    True,
    7,
]
TAGS = ["train/loss", "perf/step_time_ms", "", "x" * 300, "日本語/損失", "ü∑é", "a\x00b", "🙂"]
STEPS = [0, 1, -1, 127, 128, 2**31, 2**63 - 1, -(2**63)]
WALL_TIMES = [0.0, -0.0, 1.7e9, math.nan, math.inf, -12.5]


def random_events(count: int, seed: int = 0) -> list[tuple[int, float, dict[str, float]]]:
    rng = random.Random(seed)
    events = []
    for _ in range(count):
        values = {}
        for _ in range(rng.randint(0, 12)):
            tag = rng.choice(TAGS) + rng.choice(["", str(rng.randint(0, 99))])
            if rng.random() < 0.3:
                values[tag] = rng.choice(SPECIAL_VALUES)
            else:
                values[tag] = rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-45, 45)
        step = rng.choice(STEPS) if rng.random() < 0.3 else rng.randint(-(2**63), 2**63 - 1) >> rng.randint(0, 63)
        wall_time = rng.choice(WALL_TIMES) if rng.random() < 0.3 else rng.uniform(0, 2e9)
        events.append((step, wall_time, values))
    return events


def test_bytes_equal_protobufs_pure_python_serialisation() -> None:
    """The implementation a training process uses (MindSpore forces it; conftest does the same)."""
    from google.protobuf.internal import api_implementation

    assert api_implementation.Type() == "python"
    for step, wall_time, values in random_events(5000):
        expected = scalars_event(step, wall_time, values).SerializeToString()
        assert encode_scalars_event(step, wall_time, values) == expected, (step, wall_time, values)


_UPB_CHILD = """
import json, pickle, sys
from google.protobuf.internal import api_implementation
from mindformers_tbplugin.tfevents.events import scalars_event
assert api_implementation.Type() == "upb", api_implementation.Type()
events = pickle.loads(sys.stdin.buffer.read())
print(json.dumps([scalars_event(s, w, v).SerializeToString().hex() for s, w, v in events]))
"""


def test_bytes_equal_protobufs_c_serialisation() -> None:
    """Outside training (e.g. ``mftb`` commands) protobuf's C implementation is the reference."""
    # The one value the two protobuf implementations narrow differently (halfway past FLOAT_MAX:
    # pure Python gives FLOAT_MAX, C gives inf) is left out here; the test above covers it.
    tie = 3.4028235677973366e38
    events = [(s, w, {t: v for t, v in values.items() if abs(v) != tie}) for s, w, values in random_events(2000, 1)]
    child = subprocess.run(
        [sys.executable, "-c", _UPB_CHILD],
        input=pickle.dumps(events),
        env=subprocess_env(PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="upb"),
        capture_output=True,
        check=True,
    )
    # pickle carries the exact doubles (NaN signs included) to the child.
    for (step, wall_time, values), expected in zip(events, json.loads(child.stdout), strict=True):
        assert encode_scalars_event(step, wall_time, values).hex() == expected, (step, wall_time, values)


def test_halfway_past_float32_max_narrows_like_pure_python_protobuf() -> None:
    tie = 3.4028235677973366e38
    event = encode_scalars_event(1, 1.0, {"a": tie, "b": -tie, "c": 1e39})
    assert event == scalars_event(1, 1.0, {"a": tie, "b": -tie, "c": 1e39}).SerializeToString()
    assert struct.pack("<f", FLOAT_MAX) in event and struct.pack("<f", math.inf) in event


def test_tensorboard_reads_the_written_points(tmp_path: Path) -> None:
    events = [(step, wall, values) for step, wall, values in random_events(300, 2) if step > 0 and wall > 0]
    events = [(i + 1, wall, values) for i, (_, wall, values) in enumerate(events)]
    writer = RunWriter(tmp_path / "run")
    for step, wall_time, values in events:
        writer.add_scalars(step, values, wall_time=wall_time)
    writer.close()

    expected: dict[str, list[tuple[int, float]]] = {}
    for step, _, values in events:
        for tag, value in values.items():
            if tag:  # TensorBoard files an empty tag under ""; compared below with the others
                narrowed = summary_pb2.Summary.Value(simple_value=value).simple_value  # protobuf's float32
                expected.setdefault(tag, []).append((step, narrowed))
    read = read_scalars(tmp_path / "run")
    assert set(expected) <= set(read)
    for tag, points in expected.items():
        got = read[tag]
        assert [s for s, _ in got] == [s for s, _ in points], tag
        for (_, want), (_, value) in zip(points, got, strict=True):
            assert (math.isnan(want) and math.isnan(value)) or want == value, (tag, want, value)


def _tensor_event_by_protobuf(step: int, wall_time: float, tag: str, array: np.ndarray, plugin: str, content: bytes):
    """The tensor record as protobuf's objects build it, the reference for the hand-written encoder."""
    tensor = tensor_pb2.TensorProto(
        dtype={"float16": types_pb2.DT_HALF, "float32": types_pb2.DT_FLOAT}[array.dtype.name],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in array.shape]
        ),
        tensor_content=array.astype(array.dtype.newbyteorder("<")).tobytes(),
    )
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin, content=content),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )
    value = summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=[value]))


@pytest.mark.parametrize(
    ("shape", "dtype", "tag", "content"),
    [
        ((2, 59, 256), np.float16, "moe/load", b'{"groups":["layers.3"]}'),
        ((8192, 4), np.float16, "ranks/matrix", b""),
        ((3,), np.float32, "日本語/負荷", b"\x00\xff"),
        ((0, 4), np.float16, "", b""),  # no rows: a dimension of size 0, no content
        ((1, 1, 1), np.float32, "x" * 200, b"y" * 300),  # lengths past one varint byte
    ],
)
def test_tensor_records_are_protobufs_bytes(shape: tuple[int, ...], dtype: type, tag: str, content: bytes) -> None:
    rng = np.random.default_rng(len(shape))
    array = (rng.standard_normal(shape) * 100).astype(dtype)
    for step, wall_time in [(0, 0.0), (7, 1.7e9), (2**40, -0.0), (-3, 12.5)]:
        expected = _tensor_event_by_protobuf(step, wall_time, tag, array, "moe", content).SerializeToString()
        assert tensor_event(step, wall_time, tag, array, "moe", content) == expected
    transposed = np.asfortranarray(array)  # not C-contiguous: the values in C order all the same
    assert tensor_event(7, 1.0, tag, transposed, "moe", content) == tensor_event(7, 1.0, tag, array, "moe", content)


def test_odd_values_are_narrowed_as_protobuf_narrows_them() -> None:
    tags = ("train/loss", "train/lr", "perf/step_time_ms", "非ASCII/tag", "")
    for step, values in [
        (1, (2.5, 1e-4, 120.0, -0.0, 7.0)),
        (2**40, (math.nan, math.inf, -math.inf, 1e-45, 3.4e38)),
        (0, (1e39, -1e300, 3.4028235677973366e38, 0.0, 1.0)),  # beyond float32: narrowed as protobuf does
    ]:
        for wall_time in (0.0, 1_700_000_000.25):
            expected = encode_scalars_event(step, wall_time, dict(zip(tags, values, strict=True)))
            assert expected == scalars_event(step, wall_time, dict(zip(tags, values, strict=True))).SerializeToString()
