"""``TensorBoardMonitor``: training scalars into TensorBoard event files."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from mindspore.train import Callback

from mindformers_tbplugin import bus, custom_metrics, metrics, rundir
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.metrics import MetricKind, StepMetrics
from mindformers_tbplugin.model_facts import ModelFacts, read_model_facts
from mindformers_tbplugin.ranks import Topology, current_topology
from mindformers_tbplugin.schema import ConfigError, Problem, Range, check_arguments
from mindformers_tbplugin.system_stats import DeviceMemory, HostMemory
from mindformers_tbplugin.writer import RunWriter, get_writer


class TensorBoardMonitor(Callback):
    """Write training metrics to TensorBoard: loss, lr, grad norm, loss scale, throughput, memory.

    Args:
        log_dir: Root folder of the runs; each training gets its own run folder below it. Made
            absolute against the working directory when the callback is built.
        experiment: Experiment name: the ``{experiment}`` part of the run folder name.
        run_name_pattern: Run folder name; placeholders ``{experiment}``, ``{timestamp}``
            (YYYYmmdd-HHMMSS) and ``{rank}``.
        log_every: Write the scalars every this many steps.
        flush_secs: Flush event files to disk at least this often, in seconds.
        param_norm_every: Write ``train/param_norm`` (a pass over all parameters) every this many
            steps; 0 turns it off.
        log_memory: Write host RSS (``system/host_rss_gb``) and device memory where the backend
            reports it.
        vs_samples: Also write ``train/loss_vs_samples`` and ``train/lr_vs_samples``, whose x axis is
            the number of samples consumed.
        vs_tokens: Also write ``train/loss_vs_tokens`` and ``train/lr_vs_tokens``, whose x axis is the
            number of tokens consumed.
        extra_metrics: Functions ``"package.module:function"`` called at each logged step with the
            step's callback parameters, returning ``{tag: value}``.
        max_queue: Most items held for the writer thread; beyond it the oldest are dropped (a warning
            says so), so a stalled disk cannot grow memory without bound.
        aggregate_every: Combine metrics across ranks every this many steps with one collective
            (data metrics averaged over data-parallel ranks, cross-rank system statistics); must be a
            multiple of log_every. 0 never communicates: the writing rank's own values are written,
            under ``local/`` tags.
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
    """

    def __init__(
        self,
        log_dir: str = "./output/tensorboard",
        experiment: str = "mindformers",
        run_name_pattern: str = "{experiment}_{timestamp}",
        log_every: Annotated[int, Range(min=1)] = 1,
        flush_secs: Annotated[float, Range(min=0.1, max=3600)] = 5.0,
        param_norm_every: Annotated[int, Range(min=0)] = 100,
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
    ) -> None:
        super().__init__()
        arguments = dict(locals())
        problems = check_arguments(type(self), arguments)
        if not problems:
            problems += type(self).check_cross_fields(arguments)
        self.extra_metrics = []
        references = extra_metrics if isinstance(extra_metrics, list) and not problems else []
        for index, reference in enumerate(references):
            try:
                self.extra_metrics.append(custom_metrics.resolve_extra_metric(reference))
            except ValueError as exc:
                problems.append(Problem(f"extra_metrics[{index}]", str(exc)))
        self.log_root = rundir.absolute_path(log_dir) if isinstance(log_dir, str) else None
        if self.log_root is not None and not problems:
            reason = rundir.unwritable_reason(self.log_root)
            if reason:
                problems.append(Problem("log_dir", f"cannot write to {self.log_root}: {reason}"))
        if problems:
            raise ConfigError.for_owner(type(self).__name__, problems)
        if rundir.is_non_ascii(self.log_root):
            message = (
                f"TensorBoardMonitor log_dir {self.log_root} contains non-ASCII characters; some "
                "TensorBoard versions and shells mishandle such paths. An ASCII path is safer."
            )
            logger.warning(message)
            warnings.warn(message, UserWarning, stacklevel=2)

        self.experiment = experiment
        self.run_name_pattern = run_name_pattern
        self.log_every = log_every
        self.flush_secs = flush_secs
        self.param_norm_every = param_norm_every
        self.vs_samples = vs_samples
        self.vs_tokens = vs_tokens
        self.max_queue = max_queue
        self._host_memory = HostMemory() if log_memory else None
        self._device_memory = DeviceMemory() if log_memory else None

        self.run_dir: Path | None = None
        self._writer: RunWriter | None = None
        self._topology: Topology | None = None
        self._facts = ModelFacts()
        self._step_offset = 0
        self._step = 0
        self._last_logged_step = 0
        self._last_log_time: float | None = None
        self._static_lr: float | None = None
        self._warned: set[str] = set()

    @classmethod
    def check_cross_fields(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        """Rules that involve several parameters or a value's shape (types are already right)."""
        problems = []
        pattern = arguments.get("run_name_pattern", "{experiment}_{timestamp}")
        experiment = arguments.get("experiment", "mindformers")
        unknown = rundir.unknown_run_name_fields(pattern)
        if unknown:
            allowed = ", ".join("{" + field + "}" for field in rundir.RUN_NAME_FIELDS)
            problems.append(
                Problem("run_name_pattern", f"unknown placeholder(s) {', '.join(unknown)}; allowed: {allowed}")
            )
        for key, value in (("experiment", experiment), ("run_name_pattern", pattern)):
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
        return problems

    # -- MindSpore callback hooks -----------------------------------------------------------------
    def on_train_begin(self, run_context: Any) -> None:
        self._guard("begin", self._begin, run_context)

    def on_train_step_begin(self, run_context: Any) -> None:
        if self._last_log_time is None:
            self._last_log_time = time.perf_counter()

    def on_train_step_end(self, run_context: Any) -> None:
        if self._writer is not None:
            self._guard("step", self._step_end, run_context)

    def on_train_end(self, run_context: Any) -> None:
        self._finish()

    def __exit__(self, *exc_info: Any) -> None:
        # MindSpore enters callbacks as context managers: this runs when training raises, too.
        self._finish()

    # -- internals --------------------------------------------------------------------------------
    def _begin(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        self._topology = current_topology()
        self._facts = read_model_facts(cb_params, self._topology)
        self._step_offset = self._facts.initial_global_step - int(cb_params.get("cur_step_num") or 0)
        self._step = self._last_logged_step = self._facts.initial_global_step
        self._static_lr = metrics.static_learning_rate(self._facts.optimizer)
        if not self._topology.is_writer:
            logger.info(
                "TensorBoardMonitor: rank %d does not write; rank %d writes the run.",
                self._topology.rank,
                self._topology.writer_rank,
            )
            return
        name = rundir.run_name(self.run_name_pattern, self.experiment, self._topology.rank)
        self.run_dir = rundir.create_run_dir(self.log_root, name)
        self._writer = get_writer(self.run_dir, flush_secs=self.flush_secs, max_queue=self.max_queue)
        # A START event opens every run so that TensorBoard honours a later resume's purge.
        self._writer.add_session_start(self._step + 1)
        custom_metrics.attach(self)
        logger.info(
            "TensorBoardMonitor: writing %s (rank %d of %d). View with: tensorboard --logdir %s",
            self.run_dir,
            self._topology.rank,
            self._topology.world_size,
            self.log_root,
        )

    def _step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        step = self._step = self._step_offset + int(cb_params.cur_step_num)
        steps_done = step - self._last_logged_step
        if steps_done < self.log_every:
            return
        now = time.perf_counter()
        step_metrics = metrics.train_metrics(step, metrics.read_net_outputs(cb_params.net_outputs))
        if metrics.TRAIN_LR not in step_metrics.model and self._static_lr is not None:
            step_metrics.model[metrics.TRAIN_LR] = self._static_lr
        if self._last_log_time is not None:
            step_time = (now - self._last_log_time) / steps_done
            step_metrics.system.update(
                metrics.throughput(step_time, self._facts.samples_per_step, self._facts.tokens_per_sample)
            )
        if self._host_memory is not None:
            step_metrics.system.update(self._host_memory.read())
            step_metrics.system.update(self._device_memory.read())
        if self.param_norm_every and step // self.param_norm_every > self._last_logged_step // self.param_norm_every:
            step_metrics.model[metrics.TRAIN_PARAM_NORM] = self._param_norm()
        for extra in self.extra_metrics:
            self._add_extra(extra, cb_params, step_metrics)
        self._emit(step_metrics)
        self._last_logged_step = step
        self._last_log_time = time.perf_counter()

    def _emit(self, step_metrics: StepMetrics) -> None:
        values = step_metrics.merged()
        self._writer.add_scalars(step_metrics.step, values)
        bus.publish(step_metrics.step, values)
        step = step_metrics.step
        if self.vs_samples and self._facts.samples_per_step:
            x = int(step * self._facts.samples_per_step)
            self._writer.add_scalars(x, metrics.x_axis_variants(values, metrics.VS_SAMPLES_SUFFIX))
        if self.vs_tokens and self._facts.samples_per_step and self._facts.tokens_per_sample:
            x = int(step * self._facts.samples_per_step * self._facts.tokens_per_sample)
            self._writer.add_scalars(x, metrics.x_axis_variants(values, metrics.VS_TOKENS_SUFFIX))

    def _param_norm(self) -> float:
        return metrics.global_norm(p.asnumpy() for p in self._facts.trainable_params)

    def _add_extra(self, extra: custom_metrics.ExtraMetric, cb_params: Any, step_metrics: StepMetrics) -> None:
        try:
            values = extra.fn(cb_params)
            step_metrics.by_kind(extra.kind).update({str(k): float(v) for k, v in (values or {}).items()})
        except Exception as exc:  # a user's metric must not stop training
            self._warn_once(f"extra:{extra.reference}", f"extra metric {extra.reference} failed ({exc!r}); skipping it")

    def log_custom(self, values: dict[str, float], step: int | None, kind: MetricKind) -> None:
        """Entry point of :func:`mindformers_tbplugin.log_scalars` while this monitor runs."""
        if self._writer is None:
            return
        try:
            clean = {str(tag): float(value) for tag, value in values.items()}
        except (TypeError, ValueError) as exc:
            self._warn_once("log_scalars", f"log_scalars got a value that is not a number ({exc}); dropped")
            return
        self._writer.add_scalars(self._step if step is None else int(step), clean)

    def log_custom_text(self, tag: str, text: str, step: int | None) -> None:
        """Entry point of :func:`mindformers_tbplugin.log_text` while this monitor runs."""
        if self._writer is not None:
            self._writer.add_text(self._step if step is None else int(step), str(tag), str(text))

    def _finish(self) -> None:
        custom_metrics.detach(self)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if self._host_memory is not None:
            self._host_memory.close()

    def _guard(self, key: str, fn: Any, *args: Any) -> None:
        """Run ``fn``; on error warn once and carry on: monitoring never stops training."""
        try:
            fn(*args)
        except Exception as exc:
            self._warn_once(key, f"TensorBoardMonitor: {exc!r} in {fn.__name__}; training continues")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)
