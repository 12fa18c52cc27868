"""Where a read of the MoE routers goes: its ``moe/*`` scalars and its ``moe/load`` record.

One process writes them at once. A multi-rank job with aggregation averages each layer's loads over
the ranks that hold it in the one all-reduce per interval (``ExpertLoadAggregator``), and the writing
rank writes them at their own steps, like the loss. Without aggregation a multi-rank job writes the
writing rank's own values under ``local/``. A read is scored on the writer thread of the run it
goes to; alert rules see its scalars, and the layer x expert loads behind them
(``Run.publish_expert_loads``), on the writing rank's training thread at the next logged step after
that (``ExpertLoadRouting.deliver``), or when a listener settles the run at the end of training.
"""

from __future__ import annotations

import functools
import math
from collections import deque
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
        aggregation interval holds; ``publish_to``: the Run whose listeners (alert rules) get the scalars
        and the loads behind them."""
        self.statistics = LoadStatistics(routers, dead_fraction)
        no_bias = np.array([kind != EXPERT_BIAS for kind in routers.kinds])
        self._no_bias = no_bias[:, None] if no_bias.any() else None
        self._recorder = LoadRecorder(layout.reads_per_record, routers.has_bias) if layout is not None else None
        self._content = layout.content() if layout is not None else b""  # the first record's; then empty
        self._due_record: np.ndarray | None = None  # made by the last read's scoring, for the record after it
        self._publish_to = publish_to
        # (step, written values, relative loads or None), scored on the writer thread, for publish_to's listeners
        self.ready: deque[tuple[int, dict[str, float], np.ndarray | None]] = deque()
        self.aggregator = (
            ExpertLoadAggregator(reads_per_interval, len(routers), routers.experts, routers.has_bias)
            if aggregating
            else None
        )

    def write(
        self, step: int, loads: np.ndarray, bias: np.ndarray | None, run: RunWriter | None, raw: bool, prefix: str = ""
    ) -> None:
        """Queue one read on ``run``'s writer thread, which scores it (the ``moe/*`` scalars, tags after
        ``prefix``) and writes the record when one is due: the training thread only hands the arrays over
        (a read's numpy work at DeepSeek-V3's size costs it hundreds of µs in a training step's cold
        caches). ``raw``: ``loads`` as read (a process's own); else relative already (combined over
        ranks). The arrays must not change afterwards. Listeners of ``publish_to`` get the scored read
        through :meth:`deliver`, on the training thread."""
        if run is None:
            return
        run.add_scalars_from(step, functools.partial(self._scored, step, loads, bias, raw, prefix))
        if self._recorder is not None:
            run.add_built(step, self._due_record_event)

    def deliver(self) -> None:
        """On the training thread: hand the reads scored since the last call to the listeners, each at
        its own step, the loads just before their scalars (alert rules on ``moe/*`` see a read within a
        second of its step: the writer thread's wake)."""
        while self.ready:
            step, values, relative = self.ready.popleft()
            if relative is not None:
                self._publish_to.publish_expert_loads(step, relative, self.statistics)
            self._publish_to.publish(step, values)

    def finish(self, run: RunWriter | None, step: int | None) -> None:
        """The reads of a record not yet due (end of training)."""
        if run is not None and self._recorder is not None and step is not None:
            run.add_built(step, self._pending_record_event)

    # -- on the writer thread, in the order queued -----------------------------------------------------
    def _scored(self, step: int, loads: np.ndarray, bias: np.ndarray | None, raw: bool, prefix: str) -> dict:
        loads = np.asarray(loads, dtype=np.float32)
        scale = self.statistics.scale(loads) if raw else None
        if bias is not None and self._no_bias is not None:
            bias = np.where(self._no_bias, np.nan, bias)
        values = self.statistics.scalars(loads, bias, scale)
        if prefix:
            values = {prefix + tag: value for tag, value in values.items()}
        listening = self._publish_to is not None and self._publish_to.listening
        relative = None
        if self._recorder is not None or (listening and self._publish_to.wants_expert_loads):
            relative = loads if scale is None else self.statistics.relative(loads, scale)
        if self._recorder is not None:
            self._due_record = self._recorder.add(relative, bias)
        if listening:
            self.ready.append((step, values, relative if self._publish_to.wants_expert_loads else None))
        return values

    def _due_record_event(self, step: int, wall_time: float) -> bytes | None:
        record, self._due_record = self._due_record, None
        return self._record_event(record, step, wall_time)

    def _pending_record_event(self, step: int, wall_time: float) -> bytes | None:
        return self._record_event(self._recorder.take(), step, wall_time)

    def _record_event(self, record: np.ndarray | None, step: int, wall_time: float) -> bytes | None:
        """The record (None: nothing to write), the layout in the first one written."""
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
