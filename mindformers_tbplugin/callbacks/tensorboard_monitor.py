"""``TensorBoardMonitor``: training scalars into TensorBoard event files."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from mindformers_tbplugin.callbacks import run_folder
from mindformers_tbplugin.config.schema import NON_EMPTY_TEXT, ConfigError, Problem, Range, check_entry
from mindformers_tbplugin.framework import run_description
from mindformers_tbplugin.framework.collectives import Collectives
from mindformers_tbplugin.framework.eval_hook import EvalRecorder
from mindformers_tbplugin.framework.layer_norms import LayerNorms, parameter_norm
from mindformers_tbplugin.framework.model_facts import ModelFacts, loss_scale_for_pipeline
from mindformers_tbplugin.framework.model_outputs import ModelOutputs
from mindformers_tbplugin.framework.system_stats import MemoryReadings
from mindformers_tbplugin.framework.trainers import MonitorCallback, StepEnd, TrainStart
from mindformers_tbplugin.log import WarnOnce, logger
from mindformers_tbplugin.pipeline import custom_metrics, expert_routing, listeners, metrics
from mindformers_tbplugin.pipeline.gradient_groups import NORM_GROUPS
from mindformers_tbplugin.pipeline.metrics import MetricKind, StepMetrics
from mindformers_tbplugin.pipeline.model_flops import PEAK
from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.tfevents import run_folders
from mindformers_tbplugin.tfevents.registry import get_writer, on_sigterm, remove_sigterm_listener
from mindformers_tbplugin.tfevents.writer import RunWriter


class TensorBoardMonitor(MonitorCallback):
    """Write training metrics to TensorBoard: loss, lr, grad norm, loss scale, throughput, memory.

    Args:
        log_dir: Root folder of the runs; each training gets its own run folder below it. Made
            absolute against the working directory when the callback is built. When not given:
            the launcher's folder (MFTB_LOG_DIR, <output_dir>/tensorboard), else ./output/tensorboard.
        experiment: Experiment name: the ``{experiment}`` part of the run folder name.
        run_name_pattern: Run folder name; placeholders ``{experiment}``, ``{timestamp}``
            (YYYYmmdd-HHMMSS) and ``{rank}``.
        log_every: Write the scalars every this many steps.
        flush_secs: Flush event files to disk at least this often, in seconds.
        param_norm_every: Write ``train/param_norm`` (a pass over all parameters) every this many
            steps, and ``param_norm/<group>`` when per-layer gradient norms are on; 0 turns it off.
        norm_groups: Per-layer norms' groups (``runner_wrapper.local_norm: True``): ``layer``
            (``embedding``, ``layers.N``, ``final_norm``, ``head``), ``param`` (each parameter), or a
            list of fnmatch patterns, one group each (first match wins; the rest is ``other``).
        grad_hist_every: With ``local_norm``, write the histogram of log10 per-parameter gradient
            norms (``grad_norm/per_param_log10``) every this many steps; 0 turns it off.
        log_memory: Write host RSS (``system/host_rss_gb``) and device memory where the backend
            reports it, read at most once per second.
        vs_samples: Also write ``train/loss_vs_samples`` and ``train/lr_vs_samples``, whose x axis is
            the number of samples consumed.
        vs_tokens: Also write ``train/loss_vs_tokens`` and ``train/lr_vs_tokens``, whose x axis is the
            number of tokens consumed.
        extra_metrics: Functions ``"package.module:function"`` called at each logged step with the
            step's callback parameters (classic trainer: MindSpore's cb_params; MindFormers 2.x's
            PyNative trainer: the hook's keyword arguments, ``loss``, ``grad_norm``, ``model``, ...),
            returning ``{tag: value}``.
        max_queue: Most items held for the writer thread; beyond it the oldest are dropped (a warning
            says so), so a stalled disk cannot grow memory without bound.
        aggregate_every: Combine metrics across ranks every this many steps with one collective
            (data metrics averaged over data-parallel ranks, cross-rank system statistics, the job's
            throughput); must be a multiple of log_every. 0 never communicates: the writing rank's own
            values are written, under ``local/`` tags, and no job throughput.
        rank_policy: ``writer``: one rank writes the main run (the first rank of the last pipeline
            stage); ``all``: additionally every rank writes all its own values to ``rank_<id>/``
            (debugging).
        per_rank_system: Write each rank's system metrics (step time, throughput, memory) to
            ``<run>/rank_<id>/``: true, false, or ``auto`` (only when the world size is at most
            per_rank_limit).
        per_rank_limit: Largest world size for which ``per_rank_system: auto`` writes per-rank runs;
            beyond it only the cross-rank summary and the topk_ranks slowest ranks are written.
        topk_ranks: How many of the slowest ranks (by step time) the main run lists at each
            aggregation.
        log_hparams: At train begin, write the run's hyperparameters (learning rate and schedule,
            batch sizes, sequence length, model size, parallel layout, seed, experiment) for
            TensorBoard's HParams dashboard; at the end, the session's status.
        log_config: At train begin, write the resolved YAML config as text (``run/config``), with the
            values of secret-looking keys (token, password, secret, key, ak/sk, ...) masked.
        log_graph: At train begin, write the model's cell hierarchy (types, parameter shapes, dtypes
            and counts) for the Graphs dashboard and a parameter-count table (``run/parameters``).
        log_eval: Write MindFormers' evaluation results during training (``do_eval``) as ``eval/*``
            at the training step they belong to.
        resume: When MindFormers resumes from a checkpoint (its optimizer step is restored), continue
            the newest run of this experiment instead of starting a new one; points the interrupted
            attempt wrote after the checkpoint are purged in TensorBoard.
        resume_run: Name of a run folder under log_dir to continue, resuming or not.
        keep_last_runs: Keep only this many runs of the experiment (the current one included): older
            run folders are deleted, or moved to archive_dir, at train begin. 0 keeps all.
        archive_dir: Where keep_last_runs moves old runs instead of deleting them.
        min_free_gb: Warn at train begin when the log file system has less free space than this, in GiB.
        rank_records: Write every rank's step time and memory per aggregation interval for the ranks
            dashboard (multi-rank jobs with aggregation).
        rank_record_budget: Most bytes per training step the per-rank records may average; a large world
            gets one record per several intervals, their maximum; 0: one record every interval.
        moe_every: In a mixture-of-experts model, read every MoE layer's expert load every this many
            steps (one host read per layer) for the ``moe/*`` tags, the routing alerts and the moe
            dashboard; 0 turns it off. Models without MoE layers ignore it.
        moe_record_budget: Most bytes per training step the moe dashboard's layer x expert records may
            average; a large model gets one record per several reads, their mean; 0: one every read.
        dead_expert_fraction: An expert whose load is under this share of its layer's mean load counts
            as dead (``moe/<layer>/dead_experts``).
        peak_tflops: The device's peak dense TFLOPS at the training's compute precision, for
            ``perf/mfu`` (``perf/model_tflops_per_device`` over this peak): a number, an Ascend part
            from the table in docs (e.g. ``Ascend910B3``), ``auto`` (the part MindSpore reports, when
            it is in that table), or null (no MFU).
    """

    def __init__(
        self,
        log_dir: Annotated[str | None, NON_EMPTY_TEXT] = None,
        experiment: Annotated[str, NON_EMPTY_TEXT] = "mindformers",
        run_name_pattern: Annotated[str, NON_EMPTY_TEXT] = "{experiment}_{timestamp}",
        log_every: Annotated[int, Range(min=1)] = 1,
        flush_secs: Annotated[float, Range(min=0.1, max=3600)] = 5.0,
        param_norm_every: Annotated[int, Range(min=0)] = 100,
        norm_groups: Annotated[str | list[str], NORM_GROUPS] = "layer",
        grad_hist_every: Annotated[int, Range(min=0)] = 100,
        log_memory: bool = True,
        vs_samples: bool = False,
        vs_tokens: bool = False,
        extra_metrics: list[str] | None = None,
        max_queue: Annotated[int, Range(min=100)] = 100_000,
        aggregate_every: Annotated[int, Range(min=0)] = 10,
        rank_policy: Literal["writer", "all"] = "writer",
        per_rank_system: bool | Literal["auto"] = "auto",
        per_rank_limit: Annotated[int, Range(min=1)] = 16,
        topk_ranks: Annotated[int, Range(min=0)] = 4,
        log_hparams: bool = True,
        log_config: bool = True,
        log_graph: bool = True,
        log_eval: bool = True,
        resume: bool = True,
        resume_run: str | None = None,
        keep_last_runs: Annotated[int, Range(min=0)] = 0,
        archive_dir: str | None = None,
        min_free_gb: Annotated[float, Range(min=0)] = 1.0,
        rank_records: bool = True,
        rank_record_budget: Annotated[int, Range(min=0)] = 1024,
        moe_every: Annotated[int, Range(min=0)] = 10,
        moe_record_budget: Annotated[int, Range(min=0)] = 1024,
        dead_expert_fraction: Annotated[float, Range(min=0, max=1)] = 0.1,
        peak_tflops: Annotated[float | str | None, PEAK] = "auto",
    ) -> None:
        super().__init__()
        arguments = dict(locals())
        problems = check_entry(type(self), arguments)  # the same checks as `mftb validate`, imports included
        references = extra_metrics if not problems else None
        self.extra_metrics = [custom_metrics.resolve_extra_metric(reference) for reference in references or ()]
        self.log_root = run_folders.log_root(log_dir) if isinstance(log_dir, (str, type(None))) else None
        if self.log_root is not None and not problems:
            reason = run_folders.unwritable_reason(self.log_root)
            if reason:
                problems.append(Problem("log_dir", f"cannot write to {self.log_root}: {reason}"))
        if problems:
            raise ConfigError.for_owner(type(self).__name__, problems)
        if run_folders.is_non_ascii(self.log_root):
            message = (
                f"TensorBoardMonitor log_dir {self.log_root} contains non-ASCII characters; some "
                "TensorBoard versions and shells mishandle such paths. An ASCII path is safer."
            )
            warnings.warn(message, UserWarning, stacklevel=2)  # MindFormers routes warnings to its log

        self.experiment = experiment
        self.run_name_pattern = run_name_pattern
        self.log_every = log_every
        self.flush_secs = flush_secs
        self.param_norm_every = param_norm_every
        self.norm_groups = norm_groups
        self.grad_hist_every = grad_hist_every
        self._layer_norms: LayerNorms | None = None
        self.vs_samples = vs_samples
        self.vs_tokens = vs_tokens
        self.max_queue = max_queue
        self.aggregate_every = aggregate_every
        self.rank_policy = rank_policy
        self.per_rank_system = per_rank_system
        self.per_rank_limit = per_rank_limit
        self.topk_ranks = topk_ranks
        self.resume = resume
        self.resume_run = resume_run
        self.keep_last_runs = keep_last_runs
        self.archive_dir = run_folders.absolute_path(archive_dir) if archive_dir else None
        self.min_free_gb = min_free_gb
        self.rank_records = rank_records
        self.rank_record_budget = rank_record_budget
        self.moe_every = moe_every
        self.moe_record_budget = moe_record_budget
        self.dead_expert_fraction = dead_expert_fraction
        self.peak_tflops = peak_tflops
        self._outputs: ModelOutputs | None = None
        self.resumed_from: int | None = None  # the restored step, when this run continues another
        self._run_info = run_description.RunInfoOptions(hparams=log_hparams, config=log_config, graph=log_graph)
        self._eval_recorder = EvalRecorder(self._log_eval) if log_eval else None
        self._memory = MemoryReadings() if log_memory else None

        self.run_dir: Path | None = None
        self.rank_run_dir: Path | None = None
        self._writer: RunWriter | None = None  # the main run (writing rank only)
        self._router: MetricRouter | None = None
        self._topology: Topology | None = None
        self._loss_divisor = 1.0
        self._facts = ModelFacts()
        self._request_stop: Any = None
        self._step = 0
        self._last_logged_step = 0
        self._last_log_time: float | None = None
        self._static_lr: float | None = None
        self._stopping = False
        self._warn_once = WarnOnce()

    @classmethod
    def check_cross_fields(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        """Rules that involve several parameters or a value's shape (types are already right)."""
        problems = []
        pattern = arguments.get("run_name_pattern", "{experiment}_{timestamp}")
        experiment = arguments.get("experiment", "mindformers")
        unknown = run_folders.unknown_run_name_fields(pattern)
        if unknown:
            allowed = ", ".join("{" + field + "}" for field in run_folders.RUN_NAME_FIELDS)
            problems.append(
                Problem("run_name_pattern", f"unknown placeholder(s) {', '.join(unknown)}; allowed: {allowed}")
            )
        names = [("experiment", experiment), ("run_name_pattern", pattern)]
        if arguments.get("resume_run") is not None:
            names.append(("resume_run", arguments["resume_run"]))
        for key, value in names:
            if not value or value.strip() != value or ".." in Path(value).parts or Path(value).is_absolute():
                problems.append(Problem(key, f"expected a non-empty relative folder name without '..', got {value!r}"))
        log_every = arguments.get("log_every", 1)
        aggregate_every = arguments.get("aggregate_every", 10)
        if aggregate_every and aggregate_every % log_every:
            problems.append(
                Problem(
                    "aggregate_every",
                    f"expected a multiple of log_every ({log_every}) or 0, got {aggregate_every}",
                )
            )
        for index, reference in enumerate(arguments.get("extra_metrics") or ()):
            try:
                custom_metrics.resolve_extra_metric(reference)
            except ValueError as exc:
                where = "in every rank's process (PYTHONPATH, or an installed package)"
                problems.append(Problem(f"extra_metrics[{index}]", f"{exc}; the module must be importable {where}"))
        return problems

    # -- training events (either trainer) ---------------------------------------------------------
    def train_started(self, start: TrainStart) -> None:
        self._guard("begin", self._begin, start)

    def step_began(self, step: int) -> None:
        if self._last_log_time is None:
            self._last_log_time = time.perf_counter()
        if self._outputs is not None:
            self._guard("step_begin", self._outputs.step_began, step)

    def step_ended(self, step: StepEnd) -> None:
        if self._router is not None:
            self._guard("step", self._step_end, step)

    def train_ended(self, failure: str | None) -> None:
        if failure is None:
            self._finish(clean=True)
        else:
            self._finish(clean=False, status=f"failed at step {self._step}: {failure}")

    # -- internals --------------------------------------------------------------------------------
    def _begin(self, start: TrainStart) -> None:
        listeners.reset_job_stop()
        self._topology = topology = start.topology
        self._facts = start.facts
        self._request_stop = start.request_stop
        self._step = self._last_logged_step = self._facts.initial_global_step
        self._static_lr = metrics.static_learning_rate(self._facts.optimizer)
        self._loss_divisor = loss_scale_for_pipeline(topology, start.train_network)
        self._layer_norms = LayerNorms.for_training(start, self.norm_groups, self.grad_hist_every)
        self._outputs = ModelOutputs.for_training(
            start, self._accumulators_due, self.step_of, (self.moe_every, self.moe_record_budget), self.peak_tflops
        )
        collectives = Collectives() if topology.communicating else None
        pattern, experiment = self.run_name_pattern, self.experiment
        continued, self.resumed_from = run_folder.run_to_continue(
            self.log_root, pattern, experiment, self.resume, self.resume_run, self._step
        )
        self.run_dir, hosts = run_folder.open_run_dir(
            self.log_root, pattern, experiment, continued, topology, collectives
        )
        if topology.is_writer:
            self._writer = self._open_writer(self.run_dir)
            listeners.set_main_run(self.run_dir.relative_to(self.log_root).as_posix())  # AlertMonitor's `run`
            retention = (self.run_dir, self.keep_last_runs, self.archive_dir, self.min_free_gb)
            self._guard("housekeeping", run_folder.housekeeping, self.log_root, pattern, experiment, *retention)
            if self.resumed_from is not None:
                run_folder.mark_restart(self._writer, self._step + 1, self.resumed_from, start.checkpoint)
                logger.info("TensorBoardMonitor: continuing %s after step %d", self.run_dir, self.resumed_from)
            on_sigterm(self._on_sigterm)
        per_rank = self.per_rank_system is True or (
            self.per_rank_system == "auto" and topology.world_size <= self.per_rank_limit
        )
        rank_writer = None
        if topology.world_size > 1 and (per_rank or self.rank_policy == "all"):
            self.rank_run_dir = self.run_dir / f"rank_{topology.rank}"
            rank_writer = self._open_writer(self.rank_run_dir)
        layout = run_folder.rank_layout_of(hosts, topology, self.aggregate_every, self.rank_record_budget)
        options = RouterOptions(
            aggregate_every=self.aggregate_every,
            rank_policy=self.rank_policy,
            topk_ranks=0 if per_rank else self.topk_ranks,
            vs_samples=self.vs_samples,
            vs_tokens=self.vs_tokens,
            samples_per_step=self._facts.samples_per_step,
            tokens_per_sample=self._facts.tokens_per_sample,
            gradient_groups=self._layer_norms.gradients if self._layer_norms else None,
            rank_layout=layout if self.rank_records else None,
            **expert_routing.router_options(
                self._outputs.routers,
                *(self.moe_every, self.log_every, self.aggregate_every, self.moe_record_budget),
                self.dead_expert_fraction,
            ),
        )
        self._router = MetricRouter(topology, options, self._writer, rank_writer, collectives)
        custom_metrics.attach(self)
        if self._eval_recorder is not None:
            self._eval_recorder.attach(start.eval_callbacks)
        if self._writer is not None:
            self._guard(
                "run_info",
                run_description.write_run_start,
                *(self._writer, start, self.experiment, self._run_info, self._outputs.hparams),
            )
        logger.info("TensorBoardMonitor: %s", topology.describe())
        if self._layer_norms is not None:
            logger.info("TensorBoardMonitor: %s", self._layer_norms.describe())
        logger.info("TensorBoardMonitor: %s", self._outputs.describe())
        if self._writer is not None:
            logger.info("TensorBoardMonitor: writing %s. View it: mftb tensorboard %s", self.run_dir, self.log_root)

    def _on_sigterm(self) -> None:
        """Runs in the SIGTERM handler, before the writers close."""
        self._finish(clean=False, status=f"terminated at step {self._step}")

    def _open_writer(self, run_dir: Path) -> RunWriter:
        writer = get_writer(run_dir, flush_secs=self.flush_secs, max_queue=self.max_queue)
        # A START event opens every run so that TensorBoard honours a later resume's purge.
        writer.add_session_start(self._step + 1)
        return writer

    def _step_end(self, step_end: StepEnd) -> None:
        # Runs at every step: kept to few Python-level operations (see BENCHMARKS.md).
        step = self._step = step_end.step
        steps_done = step - self._last_logged_step
        if steps_done < self.log_every:
            return
        now = time.perf_counter()
        outputs = step_end.outputs()
        step_metrics = metrics.train_metrics(step, outputs)
        if self._layer_norms is not None:
            step_metrics.grad_squares = self._layer_norms.read(step, self._last_logged_step, outputs, self._writer)
        data, model, system = step_metrics.data, step_metrics.model, step_metrics.system
        if self._loss_divisor != 1.0 and metrics.TRAIN_LOSS in data:
            data[metrics.TRAIN_LOSS] /= self._loss_divisor
        if self._static_lr is not None and metrics.TRAIN_LR not in model:
            model[metrics.TRAIN_LR] = self._static_lr
        step_time = None if self._last_log_time is None else (now - self._last_log_time) / steps_done
        if step_time is not None:
            system.update(metrics.throughput(step_time, self._facts.samples_per_step, self._facts.tokens_per_sample))
        self._outputs.add_to(step_metrics, self._loss_divisor, step_time)
        if self._memory is not None:
            system.update(self._memory.read(now))
        if self.param_norm_every and step // self.param_norm_every > self._last_logged_step // self.param_norm_every:
            model.update(parameter_norm(self._facts.trainable_params, self._layer_norms))
        for extra in self.extra_metrics:
            self._add_extra(extra, step_end.hook_args, step_metrics)
        self._router.log_step(step_metrics)
        if self._router.stop_agreed and not self._stopping:
            self._stopping = True
            logger.warning("TensorBoardMonitor: a rank asked the job to stop; every rank stops after step %d", step)
            listeners.stop_agreed(self._topology.writer_rank)
            self._request_stop()
        self._last_logged_step = step
        self._last_log_time = time.perf_counter()

    def _accumulators_due(self, step: int) -> tuple[bool, bool]:
        """Whether ``step`` logs (loss parts) and reads the routers (expert loads)."""
        last = self._last_logged_step
        logged = step - last >= self.log_every
        return logged, logged and bool(self.moe_every) and step // self.moe_every > last // self.moe_every

    def _add_extra(self, extra: custom_metrics.ExtraMetric, cb_params: Any, step_metrics: StepMetrics) -> None:
        try:
            values = extra.fn(cb_params)
            step_metrics.by_kind(extra.kind).update({str(k): float(v) for k, v in (values or {}).items()})
        except Exception as exc:  # a user's metric must not stop training
            self._warn_once(f"extra:{extra.reference}", f"extra metric {extra.reference} failed ({exc!r}); skipping it")

    def log_custom(self, values: dict[str, float], step: int | None, kind: MetricKind) -> None:
        """Entry point of :func:`mindformers_tbplugin.log_scalars` while this monitor runs."""
        if self._router is None:
            return
        try:
            clean = {str(tag): float(value) for tag, value in values.items()}
        except (TypeError, ValueError) as exc:
            self._warn_once("log_scalars", f"log_scalars got a value that is not a number ({exc}); dropped")
            return
        self._router.log_values(self._step if step is None else int(step), clean, kind)

    def log_custom_text(self, tag: str, text: str, step: int | None) -> None:
        """Entry point of :func:`mindformers_tbplugin.log_text` while this monitor runs."""
        if self._writer is not None:
            self._writer.add_text(self._step if step is None else int(step), str(tag), str(text))

    def _log_eval(self, values: dict[str, float]) -> None:
        """Evaluation results (``eval/*``) depend on the data: combined across ranks like the loss."""
        self.log_custom(values, self._step, MetricKind.DATA)

    def _finish(self, clean: bool, status: str | None = None) -> None:
        """Close the run once: aggregate what is left, write ``meta/status``, close the files."""
        remove_sigterm_listener(self._on_sigterm)
        custom_metrics.detach(self)
        if self._outputs is not None:
            self._outputs.close()
        if self._eval_recorder is not None:
            self._eval_recorder.detach()
        router, self._router = self._router, None
        if router is not None:
            self._guard("end", router.finish, clean)  # its last aggregation may carry a stop request
            if router.stop_agreed:
                listeners.stop_agreed(self._topology.writer_rank)
        stop = listeners.finish_alert_stop(self._step) if clean and router is not None else None
        if router is not None and self._writer is not None:
            status = status or (stop.status() if stop else f"completed at step {self._step}")
            self._writer.add_text(self._step, metrics.META_STATUS, status)
        if self._writer is not None and self._run_info.hparams:  # a stop by an alert is no success
            run_description.write_run_end(self._writer, self._step, clean and stop is None)
        for writer in (self._writer, router.rank_run if router else None):
            if writer is not None:
                writer.close()
        self._writer = None
        if self._memory is not None:
            self._memory.close()

    def _guard(self, key: str, fn: Any, *args: Any) -> None:
        """Run ``fn``; on error warn once and carry on: monitoring never stops training."""
        try:
            fn(*args)
        except Exception as exc:
            self._warn_once(key, f"TensorBoardMonitor: {exc!r} in {fn.__name__}; training continues")
