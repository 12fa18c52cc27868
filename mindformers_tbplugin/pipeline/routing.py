"""Who writes what: each logged step's metrics go to the main run, this rank's run, or through
cross-rank aggregation first, according to their kind.

* data metrics (loss): on a multi-rank job, buffered and averaged over the ranks that hold them
  every ``aggregate_every`` steps (one all-reduce; longer when steps are fast, see
  :mod:`~mindformers_tbplugin.pipeline.interval_stretch`), then written to the main run at their own
  steps; with ``aggregate_every: 0`` the writing rank's own values go to the main run under ``local/``.
* model metrics (lr, grad norm): written to the main run by the writing rank, no communication.
* system metrics (step time, memory): the writing rank's own in the main run, every rank's own in
  ``<run>/rank_<id>/`` when per-rank runs are on, and cross-rank min/max/mean/argmax (plus the
  slowest ranks when per-rank runs are off), carried by the same all-reduce as the data metrics.
  That all-reduce also sums the data-parallel replicas' throughput into the job's
  (``perf/job_samples_per_s``, ``perf/job_tokens_per_s``), written by the writing rank at each
  aggregation; without aggregation (one process, ``aggregate_every: 0``) they are not written.
* per-layer gradient norms (``runner_wrapper.local_norm``): grouped here (one ``bincount``); on a
  multi-rank job their squares ride in the same all-reduce and are averaged over the ranks, then
  written with the loss at their own steps; otherwise the writing rank's own, at once (under
  ``local/`` when there are several ranks).
* MoE expert loads (``routers``): see :mod:`~mindformers_tbplugin.pipeline.expert_routing`; on a
  multi-rank job they ride in the same all-reduce.
* derived values (``derived``: the comparison with a baseline): computed from what the main run gets,
  where it is routed, and written beside it in the same event (earlier steps held back: their own).
* per-rank records (``rank_layout``): the system values every rank sent in that all-reduce, kept by
  the writing rank as a ``ranks/matrix`` tensor per interval (or per several: see
  :mod:`~mindformers_tbplugin.pipeline.rank_records`), encoded on the writer thread.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mindformers_tbplugin.log import WarnOnce, logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.aggregation import (
    MAX_DATA_TAGS,
    CollectiveOps,
    DataAggregator,
    GradientAggregator,
    JobThroughput,
    LossAggregator,
    SystemSummary,
)
from mindformers_tbplugin.pipeline.expert_load import DEFAULT_DEAD_FRACTION, RouterSet
from mindformers_tbplugin.pipeline.expert_records import ExpertLayout
from mindformers_tbplugin.pipeline.expert_routing import ExpertLoadRouting
from mindformers_tbplugin.pipeline.gradient_groups import GroupLayout
from mindformers_tbplugin.pipeline.interval_stretch import IntervalStretch
from mindformers_tbplugin.pipeline.metrics import MetricKind, StepMetrics
from mindformers_tbplugin.pipeline.rank_records import PLUGIN_NAME, TAG, RankLayout, RankRecorder
from mindformers_tbplugin.pipeline.run import Run
from mindformers_tbplugin.pipeline.slow_nodes import SlowNodeTags
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.tfevents.events import tensor_event
from mindformers_tbplugin.tfevents.writer import RunWriter

LOCAL_PREFIX = "local/"
DERIVED_WAIT_SECS = 120.0  # at the end, for values still being prepared (a baseline being read)
Derived = list[tuple[int, dict[str, float]]]


class DerivedValues(Protocol):
    """Values computed from what the main run gets (session/baseline.py's comparison)."""

    def derive(self, step: int, values: Mapping[str, float]) -> Derived:
        """``[(step, values)]`` to write for the main run's ``values`` of ``step`` (its own step's last)."""

    def drain(self, timeout: float) -> Derived:
        """At the end: what is still held back."""


@dataclass(frozen=True)
class RouterOptions:
    aggregate_every: int
    rank_policy: str  # "writer" | "all"
    topk_ranks: int  # slowest ranks listed in the main run (0 when per-rank runs show them all)
    vs_samples: bool
    vs_tokens: bool
    samples_per_step: float | None
    tokens_per_sample: int | None
    gradient_groups: GroupLayout | None = None  # set when the wrapper returns per-parameter gradient norms
    rank_layout: RankLayout | None = None  # set on the writing rank of a multi-rank job that aggregates
    rank_records: bool = True  # write the layout's per-rank records (``ranks/matrix``)
    routers: RouterSet | None = None  # set when the MoE routers' loads are read
    dead_expert_fraction: float = DEFAULT_DEAD_FRACTION
    expert_layout: ExpertLayout | None = None  # set on the writing rank: the moe dashboard's records
    expert_reads_per_interval: int = 1  # the most router reads an aggregation interval holds
    aggregate_seconds: float = 0.0  # >0: intervals stretch to last about this long (interval_stretch.py)


class MetricRouter:
    def __init__(
        self,
        topology: Topology,
        options: RouterOptions,
        main: RunWriter | None,
        rank_run: RunWriter | None,
        collectives: CollectiveOps | None,
        run: Run | None = None,
        derived: DerivedValues | None = None,
    ) -> None:
        """``run``: the training's Run (its listeners see what the main run gets; its job stop rides in
        the aggregation); by default one of the router's own. ``derived``: values computed from the
        main run's, written beside them (the writing rank)."""
        self.topology = topology
        self._derived = derived if main is not None else None
        self.run = run if run is not None else Run()
        self.options = options
        self.main = main
        self.rank_run = rank_run
        self.collectives = collectives if topology.communicating and options.aggregate_every else None
        self._data = DataAggregator(options.aggregate_every) if self.collectives else None
        self._system = SystemSummary() if self.collectives else None
        self._losses = (
            LossAggregator(options.aggregate_every, topology.rank, topology.world_size, topology.holds_data_metrics)
            if self.collectives
            else None
        )
        every, seconds = options.aggregate_every, options.aggregate_seconds
        self._stretch = IntervalStretch(every, seconds) if self.collectives else None
        self._job = (
            JobThroughput(topology.data_parallel_factor, topology.speaks_for_a_replica) if self.collectives else None
        )
        layout = options.gradient_groups
        self._grads = GradientAggregator(options.aggregate_every, len(layout)) if self.collectives and layout else None
        self._experts = (
            ExpertLoadRouting(
                options.routers,
                options.dead_expert_fraction,
                options.expert_layout if main is not None else None,
                options.expert_reads_per_interval,
                aggregating=self.collectives is not None,
                publish_to=self.run,
            )
            if options.routers is not None
            else None
        )
        # rank_policy: all: every rank's own reads too, scalars and records, in its rank run
        own_loads = options.routers is not None and rank_run is not None and options.rank_policy == "all"
        self._own_experts = (
            ExpertLoadRouting(options.routers, options.dead_expert_fraction, options.expert_layout, 1, False)
            if own_loads
            else None
        )
        ranks = options.rank_layout
        laid_out = bool(self.collectives and main is not None and ranks and ranks.world_size == topology.world_size)
        recording = laid_out and options.rank_records
        self._slow_nodes = SlowNodeTags.for_layout(ranks) if laid_out else None
        self._ranks = RankRecorder(ranks.intervals_per_record) if recording else None
        self._ranks_content = ranks.content() if recording else b""  # the first record's; then empty
        self._last_aggregated_step: int | None = None
        self._last_expert_step: int | None = None
        self._warn_once = WarnOnce()
        # (suffix, x per step) of the vs_samples / vs_tokens twins written beside the step's values
        samples, tokens = options.samples_per_step, options.tokens_per_sample
        self._x_axes: list[tuple[str, float]] = []
        if options.vs_samples and samples:
            self._x_axes.append((metrics.VS_SAMPLES_SUFFIX, samples))
        if options.vs_tokens and samples and tokens:
            self._x_axes.append((metrics.VS_TOKENS_SUFFIX, samples * tokens))
        self.aggregations = 0
        self.stop_agreed = False  # a rank asked the job to stop (JobStop.request): every rank stops
        if self.collectives is not None:
            self.run.stop.carriers += 1
        if self._experts is not None:
            self.run.on_settle(self._settle_expert_loads)
        if self._derived is not None:
            self.run.on_settle(self._settle_derived)

    # -- per step ---------------------------------------------------------------------------------
    def log_step(self, step_metrics: StepMetrics) -> None:
        """A logged step of the training loop; every rank calls this at the same steps."""
        step = step_metrics.step
        if self._last_aggregated_step is None:
            self._last_aggregated_step = step - 1
        if self.options.gradient_groups is not None:
            self._add_gradient_norms(step_metrics)
        if self._experts is not None:
            if self._experts.ready:  # reads scored on the writer thread since the last logged step
                self._experts.deliver()
            if step_metrics.expert_load is not None:
                self._last_expert_step = step
                self._add_expert_load(step_metrics)
        self._write(step_metrics)
        if self._system is not None:
            self._system.add(step_metrics.system)
            self._job.add(step_metrics.system)
            self._losses.add(step, step_metrics.data.get(metrics.TRAIN_LOSS))
        if self.aggregation_due(step):
            self.aggregate(step)

    def aggregation_due(self, step: int) -> bool:
        """Whether the logged step ``step`` ends an interval: its :meth:`log_step` runs the collective."""
        if self.collectives is None:
            return False
        every, last = self.options.aggregate_every, self._last_aggregated_step
        return step // every >= (step - 1 if last is None else last) // every + self._stretch.factor

    def _add_gradient_norms(self, step_metrics: StepMetrics) -> None:
        """Group this step's per-parameter squared gradient norms: into the interval's aggregation
        (every rank adds a row at every logged step, empty when it has no values), or at once among
        the step's model values."""
        layout, squares = self.options.gradient_groups, step_metrics.grad_squares
        if squares is not None and squares.size != len(layout.names):
            self._warn_once(
                "grad_layout",
                f"the wrapper returned {squares.size} gradient norms for {len(layout.names)} parameters; "
                "per-layer gradient norms are not written",
            )
            squares = None
        group_squares = None if squares is None else layout.group_squares(squares)
        if self._grads is not None:
            self._grads.add(step_metrics.step, group_squares)
            if self.rank_run is not None and self.options.rank_policy == "all" and group_squares is not None:
                own = self._gradient_tags(group_squares)
                self.rank_run.add_scalars(step_metrics.step, own)  # this rank's own, for debugging
        elif group_squares is not None:
            norms = self._gradient_tags(group_squares)
            if self.topology.world_size > 1:  # one rank's local values, like the loss without aggregation
                norms = {LOCAL_PREFIX + tag: value for tag, value in norms.items()}
            step_metrics.model.update(norms)

    def _add_expert_load(self, step_metrics: StepMetrics) -> None:
        """A read of the routers: into the interval's aggregation, or to the writer threads of the runs
        it is written to (``local/`` in the main run of a multi-rank job without aggregation)."""
        step, (loads, bias) = step_metrics.step, step_metrics.expert_load
        if self._own_experts is not None:
            self._own_experts.write(step, loads, bias, self.rank_run, raw=True)
        if self._experts.aggregator is not None:
            statistics = self._experts.statistics
            loads = np.asarray(loads, dtype=np.float32)
            self._experts.aggregator.add(step, statistics.relative(loads, statistics.scale(loads)), bias)
            return
        prefix = LOCAL_PREFIX if self.topology.world_size > 1 else ""
        self._experts.write(step, loads, bias, self.main, raw=True, prefix=prefix)

    def log_values(self, step: int, values: dict[str, float], kind: MetricKind) -> None:
        """Custom values (log_scalars) at ``step``, treated like built-in metrics of ``kind``. Never
        triggers the collective: user code may log on some ranks only."""
        if values:
            self._write(StepMetrics(step, **{kind.value: values}))

    def _write(self, step_metrics: StepMetrics) -> None:
        """Route one step's values: at most one event per run folder (fewer records to encode)."""
        step, data, system = step_metrics.step, step_metrics.data, step_metrics.system
        if self.rank_run is not None:
            own = step_metrics.merged() if self.options.rank_policy == "all" else system
            if own:
                self.rank_run.add_scalars(step, own)
        if not data or self.topology.world_size == 1:
            main = step_metrics.merged()
        elif self._data is not None:
            self._data.add(step, data)
            main = {**step_metrics.model, **system}
        else:
            main = {**step_metrics.model, **system, **{LOCAL_PREFIX + tag: value for tag, value in data.items()}}
        if self.main is not None and main:
            self._write_main(step, main)

    def _write_main(self, step: int, values: dict[str, float]) -> None:
        if self._derived is not None:
            values = self._with_derived(step, values)
        self.main.add_scalars(step, values)
        self.run.publish(step, values)
        for suffix, per_step in self._x_axes:
            variants = metrics.x_axis_variants(values, suffix)
            if variants:
                self.main.add_scalars(int(step * per_step), variants)

    def _with_derived(self, step: int, values: dict[str, float]) -> dict[str, float]:
        """``values`` with what is derived from them at ``step``; held-back steps' written first."""
        own = None
        for derived_step, derived in self._derived.derive(step, values):
            if derived_step == step:  # a held-back step may be this one too
                own = derived if own is None else {**own, **derived}
            else:
                self.main.add_scalars(derived_step, derived)
                self.run.publish(derived_step, derived)
        return values if own is None else {**values, **own}

    def _settle_derived(self, wait: float = DERIVED_WAIT_SECS) -> None:
        """The derived values still held back, written and published (the end of training)."""
        for step, derived in self._derived.drain(wait):
            self.main.add_scalars(step, derived)
            self.run.publish(step, derived)

    # -- aggregation --------------------------------------------------------------------------------
    def aggregate(self, step: int) -> None:
        """The interval's one collective; every rank must call this at the same steps."""
        steps = step - (step - 1 if self._last_aggregated_step is None else self._last_aggregated_step)
        self._last_aggregated_step = step
        self.aggregations += 1
        data, tags = self._data.pack(self.topology.holds_data_metrics)
        system = self._system.pack_slots(self.topology.rank, self.topology.world_size)
        job = self._job.pack()
        grads = self._grads.pack() if self._grads is not None else np.zeros(0, dtype=np.float32)
        experts = self._experts.aggregator if self._experts is not None else None
        loads = experts.pack() if experts is not None else np.zeros(0, dtype=np.float32)
        losses = self._losses.pack()
        proposal = self._stretch.proposal(steps)
        stop = np.array([1.0 if self.run.stop.take_request() else 0.0], dtype=np.float32)
        vector = np.concatenate([data, system, job, grads, loads, losses, proposal, stop])
        reduced = self.collectives.all_reduce_sum(vector)
        self.stop_agreed = self.stop_agreed or bool(reduced[-1] > 0)
        reduction = self._data.unpack(reduced[: data.size], tags)
        job_start = data.size + system.size
        grads_start = job_start + job.size
        gathered = reduced[data.size : job_start].reshape(self.topology.world_size, -1)
        job_rates = self._job.unpack(reduced[job_start:grads_start])
        loads_start = grads_start + grads.size
        # Model values combined in the all-reduce, written with the data metrics of their step.
        combined = self._gradient_norms(reduced[grads_start:loads_start])
        losses_start = loads_start + loads.size
        for load_step, relative, bias in (
            experts.unpack(reduced[loads_start:losses_start]) if experts is not None else ()
        ):
            self._experts.write(load_step, relative, bias, self.main, raw=False)
        by_rank = self._losses.unpack(reduced[losses_start:-2])
        self._stretch_intervals(self._stretch.agree(float(reduced[-2]), self.topology.world_size))
        self.run.keep_rank_losses(by_rank.by_step)  # before the values of their steps reach the alert rules
        for loss_step, values in by_rank.highest:
            combined.setdefault(loss_step, {}).update(values)
        if self.main is None:
            return
        if reduction.mismatch:
            self._warn_once(
                "mismatch",
                "ranks logged different data metrics in one interval, so they cannot be averaged; writing "
                f"rank {self.topology.rank}'s own values under {LOCAL_PREFIX} tags instead",
            )
        for data_step, values in reduction.steps:
            if reduction.mismatch:  # these are this rank's own values
                values = {LOCAL_PREFIX + tag: value for tag, value in values.items()}
            self._write_main(data_step, {**values, **combined.pop(data_step, {})})
        for combined_step, values in sorted(combined.items()):
            self._write_main(combined_step, values)
        if reduction.local_only:
            self._warn_once(
                "overflow",
                f"more than {MAX_DATA_TAGS} data metrics: {', '.join(self._data.overflow_tags)} are not "
                f"averaged over ranks; rank {self.topology.rank}'s own values are written under {LOCAL_PREFIX}",
            )
        for data_step, values in reduction.local_only:
            self._write_main(data_step, {LOCAL_PREFIX + tag: value for tag, value in values.items()})
        summary = {**SystemSummary.summarize(gathered, self.options.topk_ranks), **job_rates}
        if self._slow_nodes is not None:
            node_values, slow_text = self._slow_nodes.scalars(gathered[:, 0])
            summary.update(node_values)
            if slow_text:
                self.main.add_text(step, metrics.RANKS_SLOW_NODE_NAMES, slow_text)
        if summary:
            self._write_main(step, summary)
        if self._ranks is not None:  # the system values, then each rank's mean loss (rank_records.CHANNELS)
            self._write_rank_record(step, self._ranks.add(np.column_stack([gathered, by_rank.interval_means])))

    def _stretch_intervals(self, factor: int) -> None:
        """The aggregators' room for the next interval, which every rank agreed spans ``factor``
        intervals of aggregate_every steps."""
        experts = self._experts.aggregator if self._experts is not None else None
        for aggregator in (self._data, self._losses, self._grads, experts):
            if aggregator is not None:
                aggregator.stretch(factor)

    def _write_rank_record(self, step: int, record: np.ndarray | None) -> None:
        """Queue a per-rank record; the writer thread encodes it (a large world's record is big)."""
        if record is None:
            return
        content, self._ranks_content = self._ranks_content, b""
        build = functools.partial(tensor_event, tag=TAG, array=record, plugin_name=PLUGIN_NAME, content=content)
        self.main.add_built(step, build)

    def _gradient_tags(self, group_squares: np.ndarray) -> dict[str, float]:
        """``grad_norm/<group>`` and ``grad_norm/total`` from per-group squared norms."""
        return self.options.gradient_groups.tags(metrics.GRAD_NORM_PREFIX, group_squares, metrics.GRAD_NORM_TOTAL)

    def _gradient_norms(self, reduced: np.ndarray) -> dict[int, dict[str, float]]:
        """``{step: {grad_norm/<group>: norm, grad_norm/total: norm}}`` from the reduced block."""
        if self._grads is None:
            return {}
        return {step: self._gradient_tags(squares) for step, squares in self._grads.unpack(reduced).items()}

    def finish(self, clean: bool) -> None:
        """End of training. After a clean end every rank aggregates what is left; after a failure
        no collective is attempted (other ranks may be gone) and this rank's values are written."""
        if self._derived is not None:
            # the baseline waited for (not after a failure or SIGTERM): the last aggregation's steps compared at once
            self._settle_derived(DERIVED_WAIT_SECS if clean else 0.0)
        if self._data is None:
            self._finish_expert_records()
            return
        self.run.stop.carriers = max(self.run.stop.carriers - 1, 0)
        pending_grads = self._grads.pending if self._grads is not None else []
        pending_loads = self._experts.aggregator.pending if self._experts is not None else []
        last_steps = [pending[-1][0] for pending in (self._data.pending, pending_grads, pending_loads) if pending]
        if last_steps and clean:
            self.aggregate(max(last_steps))
        elif last_steps and self.main is not None:
            own: dict[int, dict[str, float]] = {}
            for step, values in self._data.pending:
                own[step] = {LOCAL_PREFIX + tag: v for tag, v in values.items()}
            for step, squares in pending_grads:
                if squares is not None:
                    norms = self._gradient_tags(squares)
                    own.setdefault(step, {}).update({LOCAL_PREFIX + tag: v for tag, v in norms.items()})
            for step, relative, bias in pending_loads:
                loads = self._experts.statistics.scalars(relative, bias)
                own.setdefault(step, {}).update({LOCAL_PREFIX + tag: v for tag, v in loads.items()})
            for step in sorted(own):
                self.main.add_scalars(step, own[step])
            self._data.pending = []
            self._losses.pending = []
            if self._grads is not None:
                self._grads.pending = []
            if self._experts is not None:
                self._experts.aggregator.pending = []
        if self._ranks is not None and self._last_aggregated_step is not None:
            # The intervals of a record not yet due; no collective needed, so after a failure too.
            self._write_rank_record(self._last_aggregated_step, self._ranks.take())
        self._finish_expert_records()
        intervals = max(self.aggregations, 1)
        logger.info(
            "TensorBoardMonitor: %d aggregation interval(s), %d collective(s) in all; all-reduce per interval: "
            "%d bytes, %.3f ms",
            self.aggregations,
            self.collectives.calls,
            round(self.collectives.reduced_bytes / intervals),
            self.collectives.reduce_seconds * 1e3 / intervals,
        )

    def _finish_expert_records(self) -> None:
        """The moe records of reads not yet in one (no collective needed), and every read scored to the
        listeners."""
        if self._experts is not None:
            self._experts.finish(self.main, self._last_expert_step)
            self._settle_expert_loads()
        if self._own_experts is not None:
            self._own_experts.finish(self.rank_run, self._last_expert_step)

    def _settle_expert_loads(self) -> None:
        """Wait for the writer thread to score the reads queued so far, and publish them."""
        if self.main is not None and self.run.listening:
            self.main.flush()
        self._experts.deliver()
