"""``type: TensorBoard``: the spelling of widely read articles, which MindSpore has no callback for.

It is TensorBoardMonitor with the articles' keys mapped, plus, for ``histogram_interval``, the
HistogramMonitor it asks for; it says once what each key became.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from mindformers_tbplugin.callbacks.histogram_monitor import HistogramMonitor
from mindformers_tbplugin.callbacks.tensorboard_monitor import TensorBoardMonitor
from mindformers_tbplugin.config import replacements
from mindformers_tbplugin.framework.trainers import StepEnd, TrainStart
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.schema import ConfigError, Problem, Range, check_entry


class TensorBoard(TensorBoardMonitor):
    """TensorBoardMonitor under the name the articles use (``type: TensorBoard``), with their keys:
    ``log_dir`` as in TensorBoardMonitor, ``histogram_interval`` as a HistogramMonitor; every other
    TensorBoardMonitor option works too. One info line at start says what each key became.

    Args:
        histogram_interval: Parameter histograms every this many epochs (a HistogramMonitor with
            every_epochs set to it); 0 or null: none.
        update_time: Ignored: it is how often the viewer reloads, a TensorBoard option
            (mftb tensorboard LOGDIR --reload_interval N).
        profile: Ignored: profiling is MindSpore's Profiler, not part of these logs.
    """

    def __init__(
        self,
        histogram_interval: Annotated[int | None, Range(min=0)] = None,
        update_time: Annotated[float | None, Range(min=0)] = None,
        profile: int | bool | None = None,
        **monitor_options: Any,
    ) -> None:
        own = {"histogram_interval": histogram_interval, "update_time": update_time, "profile": profile}
        problems = check_entry(type(self), own | monitor_options)  # every problem at once, ours and the monitor's
        if problems:
            raise ConfigError.for_owner(type(self).__name__, problems)
        super().__init__(**monitor_options)
        every = histogram_interval or 0
        self.histograms = HistogramMonitor(every_steps=0, every_epochs=every) if every else None
        given = {key: value for key, value in own.items() if value is not None} | monitor_options
        logger.info("TensorBoard: %s", "; ".join(p.message for p in self.config_notes(given)))

    @classmethod
    def config_notes(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        """What each of the articles' keys became (``mftb validate`` shows these as notes)."""
        return [Problem(key, message) for key, message in replacements.alias_notes(arguments)]

    # -- training events: the monitor first (it opens the run), then the histograms ----------------
    def train_started(self, start: TrainStart) -> None:
        super().train_started(start)
        if self.histograms is not None:
            self.histograms.train_started(start)

    def step_ended(self, step: StepEnd) -> None:
        super().step_ended(step)
        if self.histograms is not None:
            self.histograms.step_ended(step)

    def epoch_ended(self, epoch: int, step: int) -> None:
        if self.histograms is not None:
            self.histograms.epoch_ended(epoch, step)
        super().epoch_ended(epoch, step)

    def train_ended(self, failure: str | None) -> None:
        if self.histograms is not None:
            self.histograms.train_ended(failure)
        super().train_ended(failure)
