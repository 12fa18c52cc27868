"""The one event decoder (tfevents/decode.py) against protobuf's own parse, on every kind of event
the package writes and on a scalar written the TensorFlow 2 way (a tensor with the scalars plugin)."""

from __future__ import annotations

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

from mindformers_tbplugin.tfevents import events
from mindformers_tbplugin.tfevents.decode import decode_event, tensor_array

BUILT = {
    "scalars": events.scalars_event(3, 1.5, {"train/loss": 2.5, "train/lr": 0.001}),
    "text": events.text_event(4, 2.0, "meta/status", "completed at step 4"),
    "histogram": events.histogram_event(
        5, 3.0, "params/w", {"min": 0.0, "max": 1.0, "num": 3.0, "sum": 1.0, "sum_squares": 2.0}, [0.5, 1.0], [1.0, 2.0]
    ),
    "tensor": events.tensor_event(6, 4.0, "moe/load", np.arange(6, dtype=np.float16).reshape(2, 3), "moe", b"{}"),
    "start": events.session_start_event(7, 5.0),
    "negative step": events.scalars_event(-2, 6.0, {"x": 1.0}),
}


@pytest.mark.parametrize("name", BUILT)
def test_the_decoder_reads_what_protobuf_reads(name: str) -> None:
    built = BUILT[name]
    payload = built if isinstance(built, bytes) else built.SerializeToString()
    ours, theirs = decode_event(payload), event_pb2.Event.FromString(payload)
    assert (ours.wall_time, ours.step, ours.has_summary) == (theirs.wall_time, theirs.step, theirs.HasField("summary"))
    assert ours.session_start == (theirs.session_log.status == event_pb2.SessionLog.START)
    assert [v.tag for v in ours.values] == [v.tag for v in theirs.summary.value]
    for mine, value in zip(ours.values, theirs.summary.value, strict=True):
        assert mine.simple_value == (value.simple_value if value.HasField("simple_value") else None)
        assert mine.plugin_name == value.metadata.plugin_data.plugin_name
        assert mine.plugin_content == value.metadata.plugin_data.content
        if value.HasField("tensor"):
            dtype, dims, content = tensor_array(mine.tensor)
            assert dtype == value.tensor.dtype and content == value.tensor.tensor_content
            assert dims == tuple(d.size for d in value.tensor.tensor_shape.dim)


def test_the_hand_written_scalar_encoding_decodes_too() -> None:
    payload = events.encode_scalars_event(9, 1.0, {"a": 1.0, "b": -2.0})
    assert [(v.tag, v.simple_value) for v in decode_event(payload).values] == [("a", 1.0), ("b", -2.0)]


def test_a_tensorflow2_scalar_is_a_scalar_tensor() -> None:
    metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[0.25])
    value = summary_pb2.Summary.Value(tag="loss", metadata=metadata, tensor=tensor)
    (decoded,) = decode_event(
        event_pb2.Event(step=1, summary=summary_pb2.Summary(value=[value])).SerializeToString()
    ).values
    assert decoded.is_scalar and decoded.has_metadata and decoded.tensor is not None


def test_bytes_that_are_no_event_decode_to_none() -> None:
    assert decode_event(b"\x0a\xff\xff\xff") is None
