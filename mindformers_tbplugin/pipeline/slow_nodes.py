"""Slow ranks and slow nodes: one rule for the ``ranks/*`` tags and the ranks dashboard.

A rank is slow in an interval (or a record) when its step time is above SLOW_FACTOR x the median over
ranks; a node is slow when every one of its ranks is: a host, not a rank (a throttled or sick machine,
its network link). numpy only, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.rank_records import RankLayout

SLOW_FACTOR = 1.1


@dataclass(frozen=True)
class NodeGroups:
    """The ranks of each node, for per-node reductions over rank columns."""

    order: np.ndarray  # the ranks sorted by node (stable)
    starts: np.ndarray  # where each node's ranks start in ``order``
    sizes: np.ndarray  # ranks per node (0 for an index that holds none)

    @classmethod
    def of(cls, nodes: Sequence[int], world_size: int) -> NodeGroups:
        node_of = np.asarray(nodes, np.int64) if len(nodes) == world_size else np.zeros(world_size, np.int64)
        order = np.argsort(node_of, kind="stable")
        count = int(node_of.max()) + 1 if world_size else 0
        starts = np.searchsorted(node_of[order], np.arange(count))
        return cls(order, starts, np.diff(np.append(starts, world_size)))

    def ranks_of(self, node: int) -> np.ndarray:
        return self.order[self.starts[node] : self.starts[node] + self.sizes[node]]

    def whole(self, slow: np.ndarray) -> np.ndarray:
        """(records, nodes): every rank of the node slow, from ``slow`` (records, ranks) bool."""
        if not len(self.starts):
            return np.zeros((len(slow), 0), bool)
        # reduceat at an empty node's start reads the next node's first rank: the sizes mask it
        in_node = np.add.reduceat(slow[:, self.order].astype(np.int32), self.starts, axis=1)
        return (in_node == self.sizes) & (self.sizes > 0)


class SlowNodeTags:
    """On the writing rank of a job on several nodes: per aggregation interval, the straggler's node and
    the nodes whose ranks were all slow (``host5: 8 of 8 ranks slow, 1.42x the median``, said again
    only when that set changes)."""

    def __init__(self, layout: RankLayout) -> None:
        self.layout = layout
        self.groups = NodeGroups.of(layout.nodes, layout.world_size)
        self._said: tuple[int, ...] = ()

    @classmethod
    def for_layout(cls, layout: RankLayout | None) -> SlowNodeTags | None:
        return cls(layout) if layout is not None and len(set(layout.nodes)) > 1 else None

    def scalars(self, step_times: np.ndarray) -> tuple[dict[str, float], str | None]:
        """The tags of one interval from each rank's mean step time, and the text when the slow set changed."""
        known = np.isfinite(step_times)
        if not known.any():
            return {}, None
        with np.errstate(invalid="ignore", divide="ignore"):
            relative = np.where(known, step_times / np.median(step_times[known]), -np.inf)
        whole = self.groups.whole(relative[None, :] > SLOW_FACTOR)[0]
        values = {
            metrics.RANKS_STRAGGLER_NODE: float(self.layout.nodes[int(relative.argmax())]),
            metrics.RANKS_SLOW_NODES: float(whole.sum()),
        }
        slow = tuple(np.flatnonzero(whole).tolist())
        changed, self._said = slow != self._said, slow
        return values, (self._describe(slow, relative) if changed and slow else None)

    def _describe(self, slow: tuple[int, ...], relative: np.ndarray) -> str:
        names, parts = self.layout.node_names, []
        for node in slow:
            ranks = self.groups.ranks_of(node)
            size, factor = int(self.groups.sizes[node]), float(np.median(relative[ranks]))
            first, last = int(ranks.min()), int(ranks.max())
            name = names[node] if node < len(names) else f"node {node}"
            parts.append(f"node {name}: {size} of {size} ranks slow, {factor:.2f}x the median (ranks {first}..{last})")
        return "; ".join(parts)
