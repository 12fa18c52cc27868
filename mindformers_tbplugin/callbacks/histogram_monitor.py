"""``HistogramMonitor``: parameter histograms in the run of the process's TensorBoardMonitor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from mindformers_tbplugin.framework.collectives import device_target
from mindformers_tbplugin.framework.trainers import MonitorCallback, StepEnd, TrainStart
from mindformers_tbplugin.log import WarnOnce, logger
from mindformers_tbplugin.pipeline import custom_metrics, histograms, schedules
from mindformers_tbplugin.schema import ConfigError, Problem, Range, check_entry
from mindformers_tbplugin.tfevents.registry import get_writer

TAG_PREFIX = "params/"


class HistogramMonitor(MonitorCallback):
    """Write histograms of the trainable parameters (TensorBoard's Histograms and Distributions
    dashboards) into the run of the TensorBoardMonitor of the same training, on the rank that writes
    it. Tags are ``params/<parameter name>``.

    Args:
        every_steps: Write a round of histograms every this many training steps; 0: not by steps.
        every_epochs: Write a round of histograms at the end of every this many epochs; 0: not by
            epochs.
        include: Parameter-name patterns (shell style, e.g. ``"*attention*"``); only matching
            parameters are written. null: all trainable parameters.
        exclude: Parameter-name patterns to leave out, applied after include.
        max_elements: Most values read per parameter; a larger tensor is summarised from a
            deterministic strided sample of this size, so the cost of a histogram is bounded.
        bins: Equal-width buckets per histogram, between the smallest and largest value.
    """

    def __init__(
        self,
        every_steps: Annotated[int, Range(min=0)] = 100,
        every_epochs: Annotated[int, Range(min=0)] = 0,
        include: list[str] | None = None,
        exclude: list[str] | None = None,
        max_elements: Annotated[int, Range(min=100)] = 65_536,
        bins: Annotated[int, Range(min=2, max=1000)] = 30,
    ) -> None:
        super().__init__()
        arguments = dict(locals())
        problems = check_entry(type(self), arguments)  # the same checks as `mftb validate`
        if problems:
            raise ConfigError.for_owner(type(self).__name__, problems)
        self.every_steps = every_steps
        self.every_epochs = every_epochs
        self.include = list(include) if include else None
        self.exclude = list(exclude) if exclude else None
        self.max_elements = max_elements
        self.bins = bins
        self._params: list[Any] = []  # the selected parameters, fixed at train begin
        self._on_device = False
        self._last_step = 0  # global step of the last round (the initial step before the first)
        self._warn_once = WarnOnce()

    @classmethod
    def check_cross_fields(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        if not arguments.get("every_steps", 100) and not arguments.get("every_epochs", 0):
            return [Problem("every_steps", "every_steps and every_epochs are both 0: no histogram would be written")]
        return []

    # -- training events (either trainer) ---------------------------------------------------------
    def train_started(self, start: TrainStart) -> None:
        try:
            self._begin(start)
        except Exception as exc:  # monitoring never stops training
            self._warn_once("begin", f"HistogramMonitor: {exc!r} at train begin; no histograms")
            self._params = []

    def step_ended(self, step: StepEnd) -> None:
        # Crossing a multiple, not landing on it: in sink mode the step advances by sink_size.
        if self._params and self.every_steps and step.step // self.every_steps > self._last_step // self.every_steps:
            self._guarded_round(step.step)

    def epoch_ended(self, epoch: int, step: int) -> None:
        if self._params and self.every_epochs and epoch % self.every_epochs == 0:
            self._guarded_round(step)

    # -- internals --------------------------------------------------------------------------------
    def _begin(self, start: TrainStart) -> None:
        if not start.topology.is_writer:
            return
        facts = start.facts
        self._last_step = facts.initial_global_step
        by_name = {param.name: param for param in facts.trainable_params}
        chosen = histograms.select_names(by_name, self.include, self.exclude)
        self._params = [by_name[name] for name in chosen]
        if not self._params:
            self._warn_once(
                "empty", f"HistogramMonitor: no parameter matches include={self.include} exclude={self.exclude}"
            )
        self._on_device = device_target() != "CPU"  # a CPU tensor's asnumpy() shares memory: sample in numpy
        schedule = [f"every {self.every_steps} steps"] * bool(self.every_steps)
        schedule += [f"every {self.every_epochs} epochs"] * bool(self.every_epochs)
        logger.info(
            "HistogramMonitor: %d of %d trainable parameters, %s, %d buckets",
            len(self._params),
            len(by_name),
            " and ".join(schedule),
            self.bins,
        )
        silent = self._silent_schedules(start)
        if silent and len(silent) == len(schedule):
            self._warn_once("silent", f"HistogramMonitor writes nothing in this training: {'; '.join(silent)}")

    def _silent_schedules(self, start: TrainStart) -> list[str]:
        """The schedules that never come due before training ends, each saying why."""
        end = start.final_step
        silent = schedules.never_due({"every_steps": self.every_steps}, self._last_step, end) if end is not None else []
        if self.every_epochs and start.epochs is not None and self.every_epochs > start.epochs:
            silent.append(f"every_epochs {self.every_epochs}, and training runs {start.epochs} epoch(s)")
        return silent

    def _guarded_round(self, step: int) -> None:
        if step <= self._last_step:  # the step and epoch schedules met
            return
        self._last_step = step
        try:
            self._round(step)
        except Exception as exc:
            self._warn_once("round", f"HistogramMonitor: {exc!r}; skipping this round, training continues")

    def _round(self, step: int) -> None:
        """Compute the histograms here (numpy); the writer thread encodes and writes them."""
        run_dir = custom_metrics.active_run_dir()
        if run_dir is None:
            self._warn_once("no-run", "HistogramMonitor: no TensorBoardMonitor writes in this process; add one")
            return
        writer = get_writer(run_dir)
        for param in self._params:
            values = histograms.sampled_values(param, self.max_elements, on_device=self._on_device)
            summary = histograms.histogram(values, self.bins)
            if summary is not None:
                writer.add_histogram(step, TAG_PREFIX + param.name, summary.stats, summary.limits, summary.counts)
