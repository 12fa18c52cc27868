"""TensorBoardMonitor's options: one dataclass, the schema every entry is checked against.

The YAML entry's keys are its fields (MindFormers' registry still builds the callback from them as
keyword arguments). :mod:`mindformers_tbplugin.schema` reads the field types, ranges and the
``Args:`` lines below for ``mftb validate``, the JSON Schema, ``mftb schema`` and docs/options.md.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from mindformers_tbplugin.pipeline import custom_metrics, metrics
from mindformers_tbplugin.pipeline.gradient_groups import NORM_GROUPS
from mindformers_tbplugin.pipeline.model_flops import PEAK
from mindformers_tbplugin.schema import NON_EMPTY_TEXT, ConfigError, Kind, Problem, Range, check_entry
from mindformers_tbplugin.tfevents import run_folders

# ``stable_rank_params``: each is also compiled (check_cross_fields), for a message naming the error.
PATTERNS = Kind(
    "a non-empty list of regular expressions",
    lambda value: isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value),
    {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
)


@dataclass(frozen=True)
class TensorBoardOptions:
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
        layer_grad_norms: Per-layer gradient norms (``grad_norm/<group>``, their histogram, the layers
            an incident names) under MindFormers 2.x's PyNative trainer, from gradient hooks, without
            MindFormers' per-parameter log lines (that trainer's ``monitor.train_state.local_norm: True``
            turns them on too). The classic trainer computes them inside its compiled step with
            ``runner_wrapper.local_norm: True``; there this option only warns when that is off.
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
        aggregate_seconds: When aggregate_every steps take less than this many seconds, an interval
            spans several of them (up to 100 steps), so that the collective, which costs about the
            same whatever it carries, stays a small share of fast steps; every rank agrees on the
            length in the previous collective. 0: exactly every aggregate_every steps.
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
        rank_records: Write every rank's step time, memory and mean loss per aggregation interval for the
            ranks dashboard (multi-rank jobs with aggregation).
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
        optimizer_state_every: Every this many steps, the norms of Adam's first and second moments per
            layer group (``adam_m_norm/<group>``, ``adam_v_norm/<group>``, ``/total``), as
            TrainingStateMonitor's ``optimizer_state_format``, and the step's parameter change per group
            (``update_norm/<group>``, ``update_ratio/<group>``: over the group's parameter norm);
            0 turns them off. Optimizers without Adam moments write no moment norms.
        attention_logit_every: Every this many steps, an mcore model's largest attention logit per
            layer (``attention_logit_max/<group>``, over the layer's heads) and over all layers
            (``attention_logit_max/all``), as TrainingStateMonitor's ``max_attention_logit_format``; only
            when the model tracks it (``model.model_config.track_max_attention_logit: True``, or the
            Muon optimizer); 0 turns it off.
        throughput_baseline: Samples per second per device at which the job scales linearly (the
            per-device throughput of a reference run); ``perf/linearity`` is the job's samples per
            second per device over it, as TrainingStateMonitor's ``throughput_linearity``; null or 0: off.
        stable_rank_every: Every this many steps, the stable rank (``weight_stable_rank/<name>``:
            ||W||_F² over the largest eigenvalue of WᵀW) and that eigenvalue (``weight_eigenvalue/<name>``)
            of the weights stable_rank_params chooses, as TrainingStateMonitor's ``stable_rank_config``;
            the training thread only copies them to the host, a worker thread computes; 0 turns it off.
        stable_rank_params: Python regular expressions: the 2-D and 3-D weights whose name one of them
            is found in (``re.search``, as ``stable_rank_config.target``); null: every such weight.
        stable_rank_experts: A 3-D weight (a stack of expert matrices): ``statistics`` writes
            ``/expert_max``, ``/expert_min`` and ``/expert_mean`` of its per-expert values, ``full``
            one value per expert (``/expert_<i>``), ``all`` both.
        baseline: A run to compare this training with while it runs: a run folder (ours or any
            TensorBoard folder) or any source ``mftb import`` reads, made absolute against the working
            directory. Read once at train begin, off the training thread: its points go to the sub-run
            ``<run>/baseline`` and every logged step it has gets ``compare/*`` (the loss's and grad
            norm's errors, and their running means); a baseline missing at start is a configuration
            error, one that cannot be read is said once and training runs without it. null: none.
    """

    log_dir: Annotated[str | None, NON_EMPTY_TEXT] = None
    experiment: Annotated[str, NON_EMPTY_TEXT] = "mindformers"
    run_name_pattern: Annotated[str, NON_EMPTY_TEXT] = "{experiment}_{timestamp}"
    log_every: Annotated[int, Range(min=1)] = 1
    flush_secs: Annotated[float, Range(min=0.1, max=3600)] = 5.0
    param_norm_every: Annotated[int, Range(min=0)] = 100
    layer_grad_norms: bool = False
    norm_groups: Annotated[str | list[str], NORM_GROUPS] = "layer"
    grad_hist_every: Annotated[int, Range(min=0)] = 100
    log_memory: bool = True
    vs_samples: bool = False
    vs_tokens: bool = False
    extra_metrics: list[str] | None = None
    max_queue: Annotated[int, Range(min=100)] = 100_000
    aggregate_every: Annotated[int, Range(min=0)] = 10
    aggregate_seconds: Annotated[float, Range(min=0, max=3600)] = 2.0
    rank_policy: Literal["writer", "all"] = "writer"
    per_rank_system: bool | Literal["auto"] = "auto"
    per_rank_limit: Annotated[int, Range(min=1)] = 16
    topk_ranks: Annotated[int, Range(min=0)] = 4
    log_hparams: bool = True
    log_config: bool = True
    log_graph: bool = True
    log_eval: bool = True
    resume: bool = True
    resume_run: str | None = None
    keep_last_runs: Annotated[int, Range(min=0)] = 0
    archive_dir: str | None = None
    min_free_gb: Annotated[float, Range(min=0)] = 1.0
    rank_records: bool = True
    rank_record_budget: Annotated[int, Range(min=0)] = 1024
    moe_every: Annotated[int, Range(min=0)] = 10
    moe_record_budget: Annotated[int, Range(min=0)] = 1024
    dead_expert_fraction: Annotated[float, Range(min=0, max=1)] = 0.1
    peak_tflops: Annotated[float | str | None, PEAK] = "auto"
    optimizer_state_every: Annotated[int, Range(min=0)] = 100
    attention_logit_every: Annotated[int, Range(min=0)] = 10
    throughput_baseline: Annotated[float | None, Range(min=0)] = None
    stable_rank_every: Annotated[int, Range(min=0)] = 0
    stable_rank_params: Annotated[list[str] | None, PATTERNS] = None
    stable_rank_experts: Literal[metrics.STABLE_RANK_EXPERT_VALUES] = "statistics"
    baseline: Annotated[str | None, NON_EMPTY_TEXT] = None

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
        for index, pattern in enumerate(arguments.get("stable_rank_params") or ()):
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(Problem(f"stable_rank_params[{index}]", f"not a regular expression: {exc}"))
        missing = missing_baseline(arguments.get("baseline"))
        if missing:  # at start: a training that cannot be compared fails fast (mftb train, mftb validate)
            problems.append(Problem("baseline", missing))
        for index, reference in enumerate(arguments.get("extra_metrics") or ()):
            try:
                custom_metrics.resolve_extra_metric(reference)
            except ValueError as exc:
                where = "in every rank's process (PYTHONPATH, or an installed package)"
                problems.append(Problem(f"extra_metrics[{index}]", f"{exc}; the module must be importable {where}"))
        return problems

    @classmethod
    def of(cls, arguments: Mapping[str, Any], owner: str) -> TensorBoardOptions:
        """The options of a YAML entry, checked as ``mftb validate`` checks them (imports of
        ``extra_metrics`` and the log folder's permissions included); raises ConfigError naming
        ``owner`` with every problem."""
        problems = check_entry(cls, dict(arguments))
        options = cls(**arguments) if not problems else None
        if options is not None:
            reason = run_folders.unwritable_reason(options.log_root)
            if reason:
                problems.append(Problem("log_dir", f"cannot write to {options.log_root}: {reason}"))
        if problems or options is None:
            raise ConfigError.for_owner(owner, problems)
        if run_folders.is_non_ascii(options.log_root):
            message = (
                f"{owner} log_dir {options.log_root} contains non-ASCII characters; some "
                "TensorBoard versions and shells mishandle such paths. An ASCII path is safer."
            )
            warnings.warn(message, UserWarning, stacklevel=3)  # MindFormers routes warnings to its log
        return options

    @property
    def log_root(self) -> Path:
        """``log_dir`` made absolute against the working directory (at the time it is asked)."""
        return run_folders.log_root(self.log_dir)

    @property
    def baseline_path(self) -> Path | None:
        """``baseline`` made absolute against the working directory (at the time it is asked)."""
        return run_folders.absolute_path(self.baseline) if self.baseline else None

    @property
    def archive_root(self) -> Path | None:
        return run_folders.absolute_path(self.archive_dir) if self.archive_dir else None

    def extra(self) -> list[custom_metrics.ExtraMetric]:
        """The ``extra_metrics`` functions, imported."""
        return [custom_metrics.resolve_extra_metric(reference) for reference in self.extra_metrics or ()]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def missing_baseline(baseline: str | None) -> str | None:
    """Why ``baseline`` cannot be the run a training is compared with: it does not exist here."""
    if not baseline or not isinstance(baseline, str):
        return None
    path = run_folders.absolute_path(baseline)
    if path.exists():
        return None
    origin = "" if Path(baseline).expanduser().is_absolute() else f" (from the working directory {Path.cwd()})"
    return f"{path}{origin} does not exist: a run folder, a log or summary file to compare the training with"
