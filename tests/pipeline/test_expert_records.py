"""The ``moe/load`` record of the ``moe`` plugin (pipeline/expert_records.py): how many router reads one
record covers within the byte budget, the layout carried as the records' plugin content, and the
recorder that averages its reads (NaN-aware) into one float16 layer x expert array per channel."""

from __future__ import annotations

import math

import numpy as np
from fakes import MOE_ROUTERS as ROUTERS

from mindformers_tbplugin.pipeline.expert_load import AUX_LOSS
from mindformers_tbplugin.pipeline.expert_records import ExpertLayout, LoadRecorder, reads_per_record

NAN = math.nan


def test_records_stay_within_the_byte_budget() -> None:
    assert reads_per_record(3, 4, 2, steps_per_read=1, budget_bytes_per_step=1024) == 1  # tiny DeepSeek-V3
    # DeepSeek-V3: 59 MoE layers (58 + MTP) x 256 experts, load and bias: 60,516 bytes a record
    assert reads_per_record(59, 256, 2, steps_per_read=10, budget_bytes_per_step=1024) == 6
    assert reads_per_record(59, 256, 2, steps_per_read=10, budget_bytes_per_step=0) == 1


def test_a_record_exactly_at_the_budget_covers_one_read_one_byte_over_covers_two() -> None:
    # 1 layer x 2 experts x 1 channel x 2 bytes + 100 bytes of overhead: 104 bytes a record.
    assert reads_per_record(1, 2, 1, steps_per_read=1, budget_bytes_per_step=104) == 1
    assert reads_per_record(1, 2, 1, steps_per_read=1, budget_bytes_per_step=103) == 2  # ceil(104 / 103)
    # Reads every 2 steps: a record may take 2 steps' budget, 2 x 52 bytes.
    assert reads_per_record(1, 2, 1, steps_per_read=2, budget_bytes_per_step=52) == 1
    # A read "every 0 steps" counts as every step: ceil(104 / 52).
    assert reads_per_record(1, 2, 1, steps_per_read=0, budget_bytes_per_step=52) == 2
    assert reads_per_record(1, 2, 1, steps_per_read=1, budget_bytes_per_step=-5) == 1  # no budget: every read


def test_the_layout_round_trips_through_the_plugin_content() -> None:
    layout = ExpertLayout(ROUTERS.groups, 4, 2, ROUTERS.kinds, ("load", "bias"), 10, 3, 0.1)
    assert ExpertLayout.from_content(layout.content()) == layout


def test_the_layout_is_compact_json_with_the_format_version() -> None:
    """What the moe plugin's readers parse (viewer/moe_store.py): the field names are the file format."""
    layout = ExpertLayout(("layers.1",), 2, 1, (AUX_LOSS,), ("load",), 5, 1, 0.1)
    assert layout.content() == (
        b'{"groups":["layers.1"],"experts":2,"top_k":1,"routers":["aux_loss"],"channels":["load"],'
        b'"steps_per_read":5,"reads_per_record":1,"dead_fraction":0.1,"version":1}'
    )


def test_a_record_is_the_nan_aware_mean_of_its_reads() -> None:
    recorder = LoadRecorder(reads=2, with_bias=True)
    first = np.array([[1.0, 3.0], [NAN, NAN]])
    second = np.array([[3.0, 1.0], [2.0, 0.0]])
    assert recorder.add(first, np.array([[0.1, 0.2], [NAN, NAN]])) is None
    record = recorder.add(second, None)
    assert record.dtype == np.float16 and record.shape == (2, 2, 2)
    np.testing.assert_array_equal(record[0], [[2.0, 2.0], [2.0, 0.0]])  # a row missing once: the other read
    np.testing.assert_allclose(record[1, 0], [0.1, 0.2], rtol=1e-3)
    assert np.isnan(record[1, 1]).all()
    assert recorder.take() is None


def test_a_recorder_without_bias_writes_the_load_channel_only() -> None:
    recorder = LoadRecorder(reads=1, with_bias=False)
    record = recorder.add(np.array([[0.5, 1.5]]), np.array([[0.1, -0.1]]))  # a bias given is not recorded
    assert record.shape == (1, 1, 2)
    np.testing.assert_array_equal(record[0], [[0.5, 1.5]])  # exact in float16


def test_fewer_than_one_read_per_record_means_one() -> None:
    recorder = LoadRecorder(reads=0, with_bias=False)
    assert recorder.reads == 1
    np.testing.assert_array_equal(recorder.add(np.array([[1.0, 1.0]]), None)[0], [[1.0, 1.0]])


def test_the_end_of_training_takes_the_mean_of_the_pending_reads_and_starts_over() -> None:
    recorder = LoadRecorder(reads=3, with_bias=False)
    assert recorder.add(np.array([[0.5, 1.5]]), None) is None
    assert recorder.add(np.array([[1.5, 0.5]]), None) is None
    np.testing.assert_array_equal(recorder.take()[0], [[1.0, 1.0]])  # two of three reads: their mean
    # The next record counts its reads from zero again: three more reads, their mean alone.
    assert recorder.add(np.array([[2.0, 0.0]]), None) is None
    assert recorder.add(np.array([[2.0, 0.0]]), None) is None
    np.testing.assert_array_equal(recorder.add(np.array([[2.0, 0.0]]), None)[0], [[2.0, 0.0]])
