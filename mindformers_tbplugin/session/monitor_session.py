"""One TensorBoardMonitor's training, from train begin to the end: what it opens, what each logged step
writes, how it closes. The callback turns its hook calls into calls here; the Run (pipeline/run.py)
holds what the training's other callbacks and user code share.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mindformers_tbplugin.framework import run_description
from mindformers_tbplugin.framework.accumulators import Captured
from mindformers_tbplugin.framework.attention_logits import AttentionLogits
from mindformers_tbplugin.framework.collectives import Collectives
from mindformers_tbplugin.framework.eval_hook import EvalRecorder
from mindformers_tbplugin.framework.layer_norms import LayerNorms, parameter_norm
from mindformers_tbplugin.framework.model_facts import loss_scale_for_pipeline
from mindformers_tbplugin.framework.model_outputs import ModelOutputs
from mindformers_tbplugin.framework.optimizer_state import OptimizerState
from mindformers_tbplugin.framework.stable_rank import StableRanks
from mindformers_tbplugin.framework.system_stats import MemoryReadings
from mindformers_tbplugin.framework.trainers import CLASSIC, StepEnd, TrainStart
from mindformers_tbplugin.framework.update_norms import ParameterUpdates
from mindformers_tbplugin.log import WarnOnce, logger
from mindformers_tbplugin.pipeline import custom_metrics, expert_routing, histograms, metrics, schedules
from mindformers_tbplugin.pipeline.metrics import MetricKind, StepMetrics
from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
from mindformers_tbplugin.pipeline.run import Run, training_run
from mindformers_tbplugin.pipeline.status_record import FAILED, FINISHED, STOPPED
from mindformers_tbplugin.registration import exit_status
from mindformers_tbplugin.session import run_folder, run_record
from mindformers_tbplugin.session.baseline import Baseline
from mindformers_tbplugin.session.status_writer import StatusWriter
from mindformers_tbplugin.session.step_backlog import StepBacklog
from mindformers_tbplugin.session.step_reads import StepReads
from mindformers_tbplugin.session.tensorboard_options import TensorBoardOptions
from mindformers_tbplugin.tfevents.registry import get_writer, on_sigterm, remove_sigterm_listener
from mindformers_tbplugin.tfevents.writer import RunWriter

NAME = "TensorBoardMonitor"
STABLE_RANK_WAIT_SECS = 120.0  # at the end, for the values of the last due step


class MonitorSession:
    def __init__(
        self,
        options: TensorBoardOptions,
        folders: tuple[Path, Path | None, Path | None],
        start: TrainStart,
        step_of: Callable[[Any], int],
    ) -> None:
        """Opens the run of the training ``start`` describes. ``folders``: the log root, the archive
        folder and the baseline as the callback resolved them when it was built; ``step_of``: a hook's
        run context to its step counted from the training's first."""
        log_root, archive, self._baseline_path = folders
        self.options, self.log_root, self.archive = options, log_root, archive
        self.run: Run = training_run(start.training)
        self.extra = options.extra()
        self.topology = start.topology
        self.facts = start.facts
        self._request_stop = start.request_stop
        self.step = self._last_logged_step = self.facts.initial_global_step
        self._last_log_time: float | None = None
        self._static_lr = metrics.static_learning_rate(self.facts.optimizer)
        self._loss_divisor = loss_scale_for_pipeline(self.topology, start.train_network)
        self._stopping = False
        self._warn_once = WarnOnce()
        self._memory = MemoryReadings() if options.log_memory else None
        self._eval = EvalRecorder(self._log_eval) if options.log_eval else None
        self.layer_norms = LayerNorms.for_training(
            start, options.norm_groups, options.grad_hist_every, options.layer_grad_norms
        )
        self.run.gradient_groups = self.layer_norms is not None  # AlertMonitor waits for them to name culprits
        writes_model = self.topology.is_writer or options.rank_policy == "all"
        self.optimizer_state = (
            OptimizerState.for_optimizer(start.facts.optimizer, options.norm_groups)
            if options.optimizer_state_every and writes_model
            else None
        )
        self.updates = (
            ParameterUpdates.for_parameters(start.facts.trainable_params, options.norm_groups)
            if options.optimizer_state_every and writes_model
            else None
        )
        tappable = start.trainer != CLASSIC or (isinstance(start.eval_callbacks, list) and bool(start.eval_callbacks))
        moe = (options.moe_every, options.moe_record_budget)
        self.outputs = ModelOutputs.for_training(start, moe, options.peak_tflops, tapped=tappable)
        mcore = self.outputs.mcore
        self.attention_logits = (
            AttentionLogits.for_training(start, mcore.config, mcore.model)
            if mcore is not None and options.attention_logit_every and writes_model
            else None
        )
        # Where a logged step's values are read, whichever trainer runs (installed once the session is open).
        self.reads = StepReads(start, self.layer_norms, self.outputs, self.attention_logits, self._ahead_due)
        self.stable_ranks: StableRanks | None = None
        if options.stable_rank_every and self.topology.is_writer:
            patterns = options.stable_rank_params or [".*"]
            params = start.facts.trainable_params
            self.stable_ranks = StableRanks.for_parameters(params, patterns, options.stable_rank_experts)
            if self.stable_ranks is None:
                logger.warning("%s: stable_rank_params %s chooses no 2-D or 3-D weight: no stable rank", NAME, patterns)
        self.writer: RunWriter | None = None  # the main run (writing rank only)
        self.status: StatusWriter | None = None  # its status record, kept by its writer thread
        self.rank_run_dir: Path | None = None
        self.resumed_from: int | None = None  # the restored step, when this run continues another
        # What a step's begin and end check before doing more than the every-step work (see step_ended).
        self._log_every = options.log_every
        periodic = {name: every for name, every in self._schedules().items() if every and name != "moe_every"}
        self._periodic_schedules = tuple(periodic.values())  # moe_every: read ahead of the step end instead
        self._next_periodic = schedules.next_due(self._periodic_schedules, self._last_logged_step)
        begin = {"optimizer_state_every": self.updates, "attention_logit_every": self.attention_logits}
        self._begin_schedules = tuple(
            periodic[name] for name, reader in begin.items() if reader is not None and name in periodic
        )
        self.next_begin: float = 0  # the first step_began runs: it starts the first step's clock
        self._backlog = StepBacklog(self.failed)
        self._background: RunWriter | None = None  # the writer whose thread routes the backlog
        self.router = self._open(start)
        self.reads.install(step_of)

    # -- train begin -------------------------------------------------------------------------------
    def _open(self, start: TrainStart) -> MetricRouter:
        options, topology, run = self.options, self.topology, self.run
        collectives = Collectives() if topology.communicating else None
        pattern, experiment = options.run_name_pattern, options.experiment
        continued, self.resumed_from = run_folder.run_to_continue(
            self.log_root, pattern, experiment, options.resume, options.resume_run, self.step
        )
        self.run_dir, hosts = run_folder.open_run_dir(
            self.log_root, pattern, experiment, continued, topology, collectives
        )
        self.baseline: Baseline | None = None
        if topology.is_writer:
            self.writer = self._open_writer(self.run_dir)
            if self._baseline_path is not None:  # read on a thread of its own
                self.baseline = Baseline(self._baseline_path, self.run_dir)
            run.name = self.run_dir.relative_to(self.log_root).as_posix()  # AlertMonitor's `run`
            retention = (self.run_dir, options.keep_last_runs, self.archive, options.min_free_gb)
            self.guard("housekeeping", run_folder.housekeeping, self.log_root, pattern, experiment, *retention)
            if self.resumed_from is not None:
                run_folder.mark_restart(self.writer, self.step + 1, self.resumed_from, start.checkpoint)
                logger.info("%s: continuing %s after step %d", NAME, self.run_dir, self.resumed_from)
            on_sigterm(self._on_sigterm)
            self.status = StatusWriter(
                self.run_dir, experiment, topology, hosts, run, start.final_step, self.resumed_from
            )
            self.status.attach(self.writer)
        per_rank = options.per_rank_system is True or (
            options.per_rank_system == "auto" and topology.world_size <= options.per_rank_limit
        )
        rank_writer = None
        if topology.world_size > 1 and (per_rank or options.rank_policy == "all"):
            self.rank_run_dir = self.run_dir / f"rank_{topology.rank}"
            rank_writer = self._open_writer(self.rank_run_dir)
        layout = run_folder.rank_layout_of(hosts, topology, options.aggregate_every, options.rank_record_budget)
        router_options = RouterOptions(
            aggregate_every=options.aggregate_every,
            aggregate_seconds=options.aggregate_seconds,
            rank_policy=options.rank_policy,
            topk_ranks=0 if per_rank else options.topk_ranks,
            vs_samples=options.vs_samples,
            vs_tokens=options.vs_tokens,
            samples_per_step=self.facts.samples_per_step,
            tokens_per_sample=self.facts.tokens_per_sample,
            gradient_groups=self.layer_norms.gradients if self.layer_norms else None,
            rank_layout=layout,
            rank_records=options.rank_records,
            **expert_routing.router_options(
                self.outputs.routers,
                *(options.moe_every, options.log_every, options.aggregate_every, options.moe_record_budget),
                options.dead_expert_fraction,
            ),
        )
        router = MetricRouter(topology, router_options, self.writer, rank_writer, collectives, run, self.baseline)
        self._background = self.writer or rank_writer
        if self._background is not None:
            self._background.before_drain = functools.partial(self._backlog.route, False)
        if self._eval is not None:
            self._eval.attach(start.eval_callbacks)
        if self.writer is not None:
            run_info = run_description.RunInfoOptions(options.log_hparams, options.log_config, options.log_graph)
            self.guard("run_info", self._describe, start, run_info)
        if self.writer is not None and start.final_step is not None:
            self._warn_never_due(start.final_step)
        logger.info("%s: %s", NAME, topology.describe())
        for said in (self.layer_norms.describe() if self.layer_norms else None, self.reads.describe()):
            if said:
                logger.info("%s: %s", NAME, said)
        for reader in (self.optimizer_state, self.attention_logits, self.stable_ranks):
            if reader is not None:
                logger.info("%s: %s", NAME, reader.describe())
        logger.info("%s: %s", NAME, self.outputs.describe())
        if self.writer is not None:
            logger.info("%s: writing %s. View it: mftb tensorboard %s", NAME, self.run_dir, self.log_root)
        return router

    def _schedules(self) -> dict[str, int]:
        """``{option: every}`` of the schedules this training runs (0: off), in the order warnings name them."""
        options = self.options
        every = {"param_norm_every": options.param_norm_every}
        if self.optimizer_state is not None or self.updates is not None:
            every["optimizer_state_every"] = options.optimizer_state_every
        if self.layer_norms is not None:
            every["grad_hist_every"] = options.grad_hist_every
        if self.outputs.routers is not None:
            every["moe_every"] = options.moe_every
        if self.attention_logits is not None:
            every["attention_logit_every"] = options.attention_logit_every
        if self.stable_ranks is not None:
            every["stable_rank_every"] = options.stable_rank_every
        return every

    def _warn_never_due(self, final_step: int) -> None:
        """One warning naming every schedule of ours this training's steps never reach."""
        options, first = self.options, self.step
        said = [schedules.never_logs(options.log_every, first, final_step)]
        said += schedules.never_due(self._schedules(), first, final_step)
        if any(said):
            self._warn_once("never_due", f"{NAME}: " + "; ".join(message for message in said if message))

    def _describe(self, start: TrainStart, run_info: run_description.RunInfoOptions) -> None:
        hparams = self.outputs.hparams
        if self.baseline is not None:
            hparams = {**hparams, run_description.BASELINE_HPARAM: str(self.baseline.source)}
        description = run_description.describe_run(start, self.options.experiment, run_info, hparams)
        run_record.write_description(self.writer, description)

    def _open_writer(self, run_dir: Path) -> RunWriter:
        writer = get_writer(run_dir, flush_secs=self.options.flush_secs, max_queue=self.options.max_queue)
        # A START event opens every run so that TensorBoard honours a later resume's purge.
        writer.add_session_start(self.step + 1)
        return writer

    # -- per step ----------------------------------------------------------------------------------
    def step_began(self, step: int) -> None:
        """Call it only from step ``next_begin`` on: earlier steps have nothing to do here."""
        if self._last_log_time is None:
            self._last_log_time = time.perf_counter()
        logged, loads_due, _ = self._ahead_due(step)
        self.reads.step_began(step)
        self.outputs.step_began(logged, loads_due)
        if self.updates is not None and self._due(step, self.options.optimizer_state_every):
            self.guard("update_norm", self.updates.step_began, step)
        if self.attention_logits is not None and self._due(step, self.options.attention_logit_every):
            self.guard("attention_logit_max", self.attention_logits.step_began)
        self.next_begin = self._next_begin_work(step)

    def _next_begin_work(self, step: int) -> float:
        """The first step from which ``step_began`` may have work, after it ran at ``step``: the next one
        while the model's accumulators may need a read there; else the first step that may cross a multiple
        of the optimizer-state or attention-logit schedule (where ``_due`` decides)."""
        if self.outputs.needs_step_begin or self.reads.needs_step_begin:
            return step + 1
        last = self._last_logged_step
        # due now: this step is logged, the next period starts after it; else the current one is still open
        return min(
            (schedules.next_due((every,), step if self._due(step, every) else last) for every in self._begin_schedules),
            default=schedules.NEVER,
        )

    def step_ended(self, step_end: StepEnd) -> None:
        # Runs at every step, when the training has just evicted the interpreter's code and data from the
        # CPU caches: every Python-level operation shows in the step time (see BENCHMARKS.md), so the
        # periodic outputs are behind one comparison (``_next_periodic``).
        step = self.step = step_end.step
        last = self._last_logged_step
        steps_done = step - last
        if steps_done < self._log_every:
            return
        now = time.perf_counter()
        step_metrics = self.reads.take(step_end)
        step_time = None if self._last_log_time is None else (now - self._last_log_time) / steps_done
        captured = self.outputs.take(step)
        if self._memory is not None:
            step_metrics.system.update(self._memory.read(now))
        if step >= self._next_periodic:
            self._add_periodic(step, last, step_metrics)
            self._next_periodic = schedules.next_due(self._periodic_schedules, step)
        for extra in self.extra:
            self._add_extra(extra, step_end.hook_args, step_metrics)
        # What is left is host work on numbers already read: routed later on the writer thread, in a batch,
        # unless this step needs it now (session/step_backlog.py).
        self._backlog.add(self._route_step, step_metrics, captured, step_time)
        if self._background is None or self.run.listening or self.router.aggregation_due(step):
            self._backlog.route()
            if self.router.stop_agreed and not self._stopping:
                self._stopping = True
                logger.warning("%s: a rank asked the job to stop; every rank stops after step %d", NAME, step)
                self.run.stop.agreed(self.topology.writer_rank)
                self._request_stop()
        self._last_logged_step = step
        self._last_log_time = time.perf_counter()

    def _route_step(self, step_metrics: StepMetrics, captured: Captured | None, step_time: float | None) -> None:
        """A logged step's tags from its read values, to the router (on whichever thread routes the backlog)."""
        data, system = step_metrics.data, step_metrics.system
        if self._loss_divisor != 1.0 and metrics.TRAIN_LOSS in data:
            data[metrics.TRAIN_LOSS] /= self._loss_divisor
        if self._static_lr is not None and metrics.TRAIN_LR not in step_metrics.model:
            step_metrics.model[metrics.TRAIN_LR] = self._static_lr
        if step_time is not None:
            system.update(metrics.throughput(step_time, self.facts.samples_per_step, self.facts.tokens_per_sample))
            if self.options.throughput_baseline:
                system.update(metrics.linearity(system, self.topology.world_size, self.options.throughput_baseline))
        self.outputs.add_to(step_metrics, captured, self._loss_divisor, step_time)
        self.router.log_step(step_metrics)

    def _add_periodic(self, step: int, last: int, step_metrics: StepMetrics) -> None:
        """The outputs on their own schedules whose period ``step`` (logged) enters since ``last``."""
        model = step_metrics.model
        squares = step_metrics.grad_squares
        if squares is not None and self.writer is not None and self.layer_norms.histogram_due(step, last):
            histogram = functools.partial(histograms.gradient_norms_histogram_event, np.array(squares, np.float64))
            self.writer.add_built(step, histogram)
        every = self.options.param_norm_every
        if every and step // every > last // every:
            model.update(parameter_norm(self.facts.trainable_params, self.layer_norms))
        every = self.options.optimizer_state_every
        if every and step // every > last // every:
            if self.optimizer_state is not None:
                model.update(self.optimizer_state.tags())
            if self.updates is not None:
                model.update(self.updates.tags(step))
        every = self.options.attention_logit_every
        if self.attention_logits is not None and step // every > last // every:
            model.update(self.attention_logits.tags(step))
        every = self.options.stable_rank_every
        if self.stable_ranks is not None and step // every > last // every:
            self.guard("stable_rank", self._measure_stable_rank, self.stable_ranks, step)

    def _measure_stable_rank(self, stable_ranks: StableRanks, step: int) -> None:
        """Copy the chosen weights for the worker thread, unless it still computes an earlier step."""
        if not stable_ranks.measure(step, self._write_model_values):
            self._warn_once(
                "stable_rank_busy",
                f"{NAME}: stable rank of step {step} skipped: an earlier step's is still being computed "
                f"(said once; a larger stable_rank_every, or fewer stable_rank_params, avoids it)",
            )

    def _write_model_values(self, step: int, values: dict[str, float]) -> None:
        """Values computed off the training thread for ``step``: straight to the main run."""
        writer = self.writer
        if writer is not None:
            writer.add_scalars(step, values)

    def _due(self, step: int, every: int) -> bool:
        """Whether ``step`` (not yet ended) will be logged and is the first logged one in a new period
        of ``every`` steps."""
        last = self._last_logged_step
        return step - last >= self.options.log_every and bool(every) and step // every > last // every

    def _ahead_due(self, step: int) -> tuple[bool, bool, bool]:
        """Whether ``step`` logs (its outputs and loss parts are read), reads the routers (expert loads) and
        the attention logits."""
        options = self.options
        logged = step - self._last_logged_step >= options.log_every
        return logged, self._due(step, options.moe_every), self._due(step, options.attention_logit_every)

    def _add_extra(self, extra: custom_metrics.ExtraMetric, cb_params: Any, step_metrics: StepMetrics) -> None:
        try:
            values = extra.fn(cb_params)
            step_metrics.by_kind(extra.kind).update({str(k): float(v) for k, v in (values or {}).items()})
        except Exception as exc:  # a user's metric must not stop training
            self._warn_once(f"extra:{extra.reference}", f"extra metric {extra.reference} failed ({exc!r}); skipping it")

    def log_values(self, values: dict[str, float], step: int | None, kind: MetricKind) -> None:
        """``log_scalars`` while the training runs."""
        try:
            clean = {str(tag): float(value) for tag, value in values.items()}
        except (TypeError, ValueError) as exc:
            self._warn_once("log_scalars", f"log_scalars got a value that is not a number ({exc}); dropped")
            return
        self._backlog.add(self.router.log_values, self.step if step is None else int(step), clean, kind)
        if self._background is None or self.run.listening:
            self._backlog.route()

    def log_text(self, tag: str, text: str, step: int | None) -> None:
        """``log_text`` while the training runs: the main run's, on the writing rank."""
        if self.writer is not None:
            self.writer.add_text(self.step if step is None else int(step), str(tag), str(text))

    def _log_eval(self, values: dict[str, float]) -> None:
        """Evaluation results (``eval/*``) depend on the data: combined across ranks like the loss."""
        self.log_values(values, self.step, MetricKind.DATA)

    # -- the end -----------------------------------------------------------------------------------
    def _on_sigterm(self) -> None:
        """Runs in the SIGTERM handler, before the writers close."""
        self.finish(clean=False, status=f"terminated at step {self.step}")

    def finish(self, clean: bool, status: str | None = None) -> None:
        """Close the run once: aggregate what is left, write ``meta/status``, close the files."""
        remove_sigterm_listener(self._on_sigterm)
        self.reads.remove()
        if self._eval is not None:
            self._eval.detach()
        if self._background is not None:
            self._background.before_drain = None
        self._backlog.route()  # the steps not yet routed, before the last aggregation
        router, self.router = self.router, None
        if router is None:
            return
        self.guard("end", router.finish, clean)  # its last aggregation may carry a stop request
        if router.stop_agreed:
            self.run.stop.agreed(self.topology.writer_rank)
        stop = self.run.stop.finish(self.step) if clean else None
        if stop is not None:
            exit_status.training_stopped_by_alert(stop.status())
        if self.stable_ranks is not None and not self.stable_ranks.close(STABLE_RANK_WAIT_SECS if clean else 0.0):
            logger.warning("%s: the last stable rank was still being computed at the end; not written", NAME)
        if self.writer is not None:
            status = status or (stop.status() if stop else f"completed at step {self.step}")
            self.writer.add_text(self.step, metrics.META_STATUS, status)
            if self.status is not None:
                self.status.end(FINISHED if clean and stop is None else STOPPED if clean else FAILED, status)
            if self.options.log_hparams:  # a stop by an alert is no success
                run_record.write_end(self.writer, self.step, clean and stop is None)
        for writer in (self.writer, router.rank_run):
            if writer is not None:
                writer.close()
        self.writer = None
        if self._memory is not None:
            self._memory.close()

    def guard(self, key: str, fn: Any, *args: Any) -> None:
        """Run ``fn``; on error warn once and carry on: monitoring never stops training."""
        try:
            fn(*args)
        except Exception as exc:
            self.failed(key, fn, exc)

    def failed(self, key: str, fn: Any, exc: Exception) -> None:
        """What :meth:`guard` says when ``fn`` raised ``exc`` (once per ``key``)."""
        self._warn_once(key, f"{NAME}: {exc!r} in {fn.__name__}; training continues")
