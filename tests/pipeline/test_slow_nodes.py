"""Slow nodes (pipeline/slow_nodes.py): a node whose every rank is slow in an interval, for the
``ranks/*`` tags and the ranks dashboard; the tags on simulated ranks through the real router."""

from __future__ import annotations

import numpy as np
from fakes import dp_metrics, make_job, train

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout
from mindformers_tbplugin.pipeline.slow_nodes import NodeGroups, SlowNodeTags

NAN = float("nan")


def layout(nodes: tuple[int, ...], names: tuple[str, ...]) -> RankLayout:
    return RankLayout(len(nodes), CHANNELS, 4, 1, nodes, names, None)


def test_a_node_is_slow_when_every_one_of_its_ranks_is() -> None:
    groups = NodeGroups.of((0, 0, 2, 2, 2), 5)  # node 1 holds no rank
    assert groups.sizes.tolist() == [2, 0, 3]
    slow = np.array([[True, True, True, True, False], [False, True, True, True, True]])
    assert groups.whole(slow).tolist() == [[True, False, False], [False, False, True]]
    assert NodeGroups.of((), 0).whole(np.zeros((1, 0), bool)).shape == (1, 0)


def test_the_tags_name_the_stragglers_node_and_the_wholly_slow_nodes_once_per_episode() -> None:
    tags = SlowNodeTags(layout((0, 0, 1, 1), ("gpu-a", "gpu-b")))
    values, text = tags.scalars(np.array([100.0, 100.0, 150.0, 150.0], np.float32))  # median 125
    assert values == {metrics.RANKS_STRAGGLER_NODE: 1.0, metrics.RANKS_SLOW_NODES: 1.0}
    assert text == "node gpu-b: 2 of 2 ranks slow, 1.20x the median (ranks 2..3)"
    assert tags.scalars(np.array([100.0, 101.0, 150.0, 160.0], np.float32))[1] is None  # the same set: said once
    values, text = tags.scalars(np.array([100.0, 130.0, 101.0, 102.0], np.float32))  # one slow rank, not a node
    assert values == {metrics.RANKS_STRAGGLER_NODE: 0.0, metrics.RANKS_SLOW_NODES: 0.0} and text is None
    assert tags.scalars(np.array([100.0, 101.0, 150.0, 160.0], np.float32))[1] is not None  # slow again: said again
    assert tags.scalars(np.array([NAN, NAN, NAN, NAN], np.float32)) == ({}, None)  # no rank had a step time


def test_a_rank_without_a_step_time_keeps_its_node_from_counting_as_slow() -> None:
    tags = SlowNodeTags(layout((0, 0, 1, 1), ("gpu-a", "gpu-b")))
    values, text = tags.scalars(np.array([100.0, 100.0, 150.0, NAN], np.float32))
    assert values[metrics.RANKS_SLOW_NODES] == 0.0 and values[metrics.RANKS_STRAGGLER_NODE] == 1.0 and text is None


def test_a_job_on_one_node_gets_no_node_tags() -> None:
    assert SlowNodeTags.for_layout(layout((0, 0), ("gpu-a",))) is None
    assert SlowNodeTags.for_layout(None) is None


def test_the_writer_rank_writes_them_at_each_aggregation_with_or_without_records() -> None:
    """dp_metrics: rank r's step time is 100 + 200 r + step: ranks 2 and 3 (node gpu-b) are slow."""
    two_nodes = layout((0, 0, 1, 1), ("gpu-a", "gpu-b"))
    for records in (True, False):
        ranks = make_job(4, aggregate_every=4, rank_layout=two_nodes, rank_records=records)
        (writer,) = [rank.main for rank in ranks if rank.main is not None]
        writer.add_built = lambda step, build: None  # type: ignore[attr-defined]
        train(ranks, range(1, 9), dp_metrics)
        assert writer.series(metrics.RANKS_SLOW_NODES) == [(4, 1.0), (8, 1.0)]
        assert writer.series(metrics.RANKS_STRAGGLER_NODE) == [(4, 1.0), (8, 1.0)]
        assert writer.series("ranks/step_time_ms_argmax") == [(4, 3.0), (8, 3.0)]  # the rank keeps its tag
        ((step, tag, text),) = writer.texts
        assert (step, tag) == (4, metrics.RANKS_SLOW_NODE_NAMES) and text.startswith("node gpu-b: 2 of 2 ranks slow")


def test_without_a_layout_there_are_no_node_tags() -> None:
    ranks = make_job(2, aggregate_every=4)
    train(ranks, range(1, 9), lambda rank, step: StepMetrics(step, system={"perf/step_time_ms": 10.0 + rank}))
    (writer,) = [rank.main for rank in ranks if rank.main is not None]
    assert not {metrics.RANKS_SLOW_NODES, metrics.RANKS_STRAGGLER_NODE} & writer.tags()
