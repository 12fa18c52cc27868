"""Where a read of the MoE routers goes: its ``moe/*`` scalars and its ``moe/load`` record.

One process writes them at once. A multi-rank job with aggregation averages each layer's loads over
the ranks that hold it in the one all-reduce per interval (``ExpertLoadAggregator``), and the writing
rank writes them at their own steps, like the loss. Without aggregation a multi-rank job writes the
writing rank's own values under ``local/``. Alert rules see the scalars, and the layer x expert
loads behind them (``Run.publish_expert_loads``), on the writing rank.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from mindformers_tbplugin.pipeline.aggregation import ExpertLoadAggregator
from mindformers_tbplugin.pipeline.expert_load import EXPERT_BIAS, LoadStatistics, RouterSet
from mindformers_tbplugin.pipeline.expert_records import (
    BIAS,
    LOAD,
    PLUGIN_NAME,
    TAG,
    ExpertLayout,
    LoadRecorder,
    reads_per_record,
)
from mindformers_tbplugin.pipeline.run import Run
from mindformers_tbplugin.tfevents.events import tensor_event
from mindformers_tbplugin.tfevents.writer import RunWriter


class ExpertLoadRouting:
    def __init__(
        self,
        routers: RouterSet,
        dead_fraction: float,
        layout: ExpertLayout | None,
        reads_per_interval: int,
        aggregating: bool,
        publish_to: Run | None = None,
    ) -> None:
        """``layout``: where the moe dashboard's records are written (the writing rank's main run, or a
        rank's own run with ``rank_policy: all``); ``reads_per_interval``: the most router reads an
        aggregation interval holds; ``publish_to``: the Run whose alert rules get the loads."""
        self.statistics = LoadStatistics(routers, dead_fraction)
        self._no_bias = np.array([kind != EXPERT_BIAS for kind in routers.kinds])
        self._recorder = LoadRecorder(layout.reads_per_record, routers.has_bias) if layout is not None else None
        self._content = layout.content() if layout is not None else b""  # the first record's; then empty
        self._publish_to = publish_to
        self.aggregator = (
            ExpertLoadAggregator(reads_per_interval, len(routers), routers.experts, routers.has_bias)
            if aggregating
            else None
        )

    def written(
        self,
        step: int,
        loads: np.ndarray,
        bias: np.ndarray | None,
        run: RunWriter | None,
        scale: np.ndarray | None = None,
    ) -> dict:
        """The scalars of one read (combined over ranks, or this process's own); where ``run`` is
        written, the record, when due, goes to its writer thread (and the loads to the alert rules).
        ``scale``: LoadStatistics.scale of raw ``loads`` (a process's own read); None: ``loads`` are
        relative already (combined over ranks). Raw loads become relative only where needed: for the
        alert rules when some listen, and for the record on the writer thread."""
        if bias is not None:
            bias = np.where(self._no_bias[:, None], np.nan, bias)
        values = self.statistics.scalars(loads, bias, scale)
        if run is not None:
            if self._publish_to is not None and self._publish_to.wants_expert_loads:
                relative = loads if scale is None else self.statistics.relative(loads, scale)
                self._publish_to.publish_expert_loads(step, relative, self.statistics)
            if self._recorder is not None:  # averaged and encoded on the writer thread, in read order
                run.add_built(step, functools.partial(self._record_event, loads, scale, bias))
        return values

    def finish(self, run: RunWriter | None, step: int | None) -> None:
        """The reads of a record not yet due (end of training)."""
        if run is not None and self._recorder is not None and step is not None:
            run.add_built(step, functools.partial(self._record_event, None, None, None))

    def _record_event(
        self, loads: np.ndarray | None, scale: np.ndarray | None, bias: np.ndarray | None, step: int, wall_time: float
    ) -> Any:
        """On the writer thread: the record when one is due (``loads`` None: whatever is pending), else
        None (nothing written). ``scale`` as in :meth:`written`."""
        if loads is None:
            record = self._recorder.take()
        else:
            relative = loads if scale is None else self.statistics.relative(loads, scale)
            record = self._recorder.add(relative, bias)
        if record is None:
            return None
        content, self._content = self._content, b""
        return tensor_event(step, wall_time, TAG, record, PLUGIN_NAME, content)


def router_options(
    routers: RouterSet | None,
    moe_every: int,
    log_every: int,
    aggregate_every: int,
    record_budget: float,
    dead_fraction: float,
) -> dict[str, Any]:
    """RouterOptions' MoE fields for a training: the records' layout and the reads an aggregation
    interval can hold (the reads fall on logged steps that cross a multiple of ``moe_every``)."""
    if routers is None:
        return {}
    channels = _channels(routers)
    reads = record_reads(routers, moe_every, record_budget)
    layout = ExpertLayout(
        routers.groups, routers.experts, routers.top_k, routers.kinds, channels, moe_every, reads, dead_fraction
    )
    per_interval = min(math.ceil(aggregate_every / moe_every), aggregate_every // max(log_every, 1)) or 1
    return {
        "routers": routers,
        "dead_expert_fraction": dead_fraction,
        "expert_layout": layout,
        "expert_reads_per_interval": max(per_interval, 1),
    }


def _channels(routers: RouterSet) -> tuple[str, ...]:
    return (LOAD, BIAS) if routers.has_bias else (LOAD,)


def record_reads(routers: RouterSet, moe_every: int, record_budget: float) -> int:
    """How many reads of the routers one ``moe/load`` record covers (the expert bias is read once per
    record: it moves slowly, and each read costs one host copy per layer)."""
    return reads_per_record(len(routers), routers.experts, len(_channels(routers)), moe_every, record_budget)
