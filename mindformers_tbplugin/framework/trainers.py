"""The two trainers that call our callbacks, read as plain values by one base class.

* **classic**: MindSpore's ``Model.train`` loop, which MindFormers' ``Trainer`` (1.x, and 2.x's
  ``mindformers.trainer``) runs. Hooks take a ``run_context`` whose ``original_args()`` holds the
  callback parameters; callbacks are entered as context managers, so a failure is seen too.
* **pynative**: MindFormers 2.x's ``mindformers.pynative.trainer.Trainer``. Hooks take
  ``(args, state, **kwargs)``: the TrainConfig, a TrainerState (``global_step`` already counts the
  finished step at ``on_step_end``), and ``model`` (a list of cells), ``optimizer``, ``lr_scheduler``,
  plus ``loss`` and ``grad_norm`` tensors at step end (the loss already averaged over data-parallel
  ranks by the trainer).

Both build their callbacks from the same registry entry, so one class must answer both: the hook
names ``on_train_begin`` and ``on_train_end`` exist in both protocols and are told apart by their
arguments. A monitor subclasses :class:`MonitorCallback` and implements ``train_started``,
``step_ended``, ``epoch_ended`` and ``train_ended``, which receive the same plain values whichever
trainer runs.
"""

from __future__ import annotations

import atexit
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from mindformers_tbplugin.framework import running_config, versions
from mindformers_tbplugin.framework.collectives import current_topology
from mindformers_tbplugin.framework.mindformers_api import resolve
from mindformers_tbplugin.framework.model_facts import ModelFacts, read_model_facts, trainable_params_of
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline.topology import PYNATIVE_LAYOUT, Topology

CLASSIC = "classic"
PYNATIVE = "pynative"


@dataclass
class TrainStart:
    """What a monitor learns at train begin."""

    trainer: str  # CLASSIC or PYNATIVE
    facts: ModelFacts
    topology: Topology
    network: Any  # the model, for its graph and parameter counts
    train_network: Any  # classic: the wrapped training cell (pipeline micro-batches); else None
    epochs: int | None
    final_step: int | None  # the global step training ends at, when the trainer says
    checkpoint: str | None  # the checkpoint a resumed run loaded, when the trainer says
    eval_callbacks: Any  # classic: the training's callback list (MindFormers' EvalCallBack); else None
    config: running_config.RunningConfig | None
    hook_args: Mapping[str, Any]  # what ``extra_metrics`` functions receive
    request_stop: Callable[[], None]  # end training after the current step
    training: Any = None  # the training's identity: the object every callback of it is handed
    steps_per_epoch: int | None = None  # classic: MindSpore's batch_num (checkpoint names count in epochs)


class StepEnd:
    """One finished training step. Built at every step: a plain class with few fields."""

    __slots__ = ("_read", "hook_args", "step")

    def __init__(self, step: int, hook_args: Any, read_outputs: Callable[[Any, int], Any]) -> None:
        self.step = step  # global step number, counting from 1 (resumed runs continue the count)
        self.hook_args = hook_args  # classic: cb_params; pynative: the hook's keyword arguments
        self._read = read_outputs

    def outputs(self) -> Any:
        """The step's outputs in MindFormers' wrapper layout ``(loss, overflow, loss_scale, lr,
        global_norm)`` (absent ones None), or a plain MindSpore network's loss. Call it only on
        logged steps: the PyNative trainer's learning rate is computed here."""
        return self._read(self.hook_args, self.step)


@functools.cache
def _warn_if_unsupported() -> None:
    """Once per process, when the first monitor is built: a framework release we do not support."""
    for message in versions.unsupported_loaded():
        logger.warning(message)


def _is_pynative_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    return bool(kwargs) or len(args) >= 2


_Base: type = resolve("Callback")


class MonitorCallback(_Base):  # type: ignore[misc, valid-type]
    """A MindSpore Callback that MindFormers 2.x's PyNative trainer can call as a TrainerCallback."""

    def __init__(self) -> None:
        super().__init__()
        _warn_if_unsupported()
        self._step_offset = 0  # classic: global step = offset + cur_step_num (non-zero when resuming)
        self._finished = True

    # -- what a monitor implements ---------------------------------------------------------------
    def train_started(self, start: TrainStart) -> None: ...

    def step_began(self, step: int) -> None:
        """``step``: the global step about to run (counting from 1)."""

    def step_ended(self, step: StepEnd) -> None: ...

    def epoch_ended(self, epoch: int, step: int) -> None: ...

    def train_ended(self, failure: str | None) -> None:
        """``failure``: None after a normal end, else what ended training (e.g. ``RuntimeError``)."""

    # -- hooks both trainers call by these names -------------------------------------------------
    def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
        try:
            if _is_pynative_call(args, kwargs):
                start = _pynative_start(args[0], args[1], kwargs)
            else:
                start = _classic_start(args[0])
                self._step_offset = start.facts.initial_global_step - int(
                    args[0].original_args().get("cur_step_num") or 0
                )
        except Exception as exc:  # monitoring never stops training: this monitor stays idle
            logger.warning("%s: could not read the training's state (%r); it writes nothing", type(self).__name__, exc)
            return
        self._finished = False
        self.train_started(start)
        if start.trainer == PYNATIVE:  # that trainer does not tell callbacks when training raises
            atexit.register(self._end_at_exit)  # after the writers' exit hook, so it runs before it

    def on_train_end(self, *args: Any, **kwargs: Any) -> None:
        self._end(None)

    # -- classic (MindSpore Model.train) ----------------------------------------------------------
    def on_train_step_begin(self, run_context: Any) -> None:
        self.step_began(self.step_of(run_context))

    def on_train_step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        self.step_ended(StepEnd(self._step_offset + int(cb_params.cur_step_num), cb_params, _classic_outputs))

    def step_of(self, run_context: Any) -> int:
        """The global step of a classic hook call (from step begin on: MindSpore counts it before)."""
        return self._step_offset + int(run_context.original_args().cur_step_num)

    def on_train_epoch_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        self.epoch_ended(int(cb_params.cur_epoch_num), self._step_offset + int(cb_params.cur_step_num))

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        # MindSpore enters callbacks as context managers: this runs when training raises, too.
        self._end(None if exc_type is None else exc_type.__name__)

    # -- pynative (MindFormers 2.x TrainerCallback) ------------------------------------------------
    def on_begin(self, args: Any, state: Any, **kwargs: Any) -> None: ...

    def on_end(self, args: Any, state: Any, **kwargs: Any) -> None: ...

    def on_epoch_begin(self, args: Any, state: Any, **kwargs: Any) -> None: ...

    def on_step_begin(self, args: Any, state: Any, **kwargs: Any) -> None:
        self.step_began(int(state.global_step) + 1)  # global_step counts the finished steps

    def on_step_end(self, args: Any, state: Any, **kwargs: Any) -> None:
        self.step_ended(StepEnd(int(state.global_step), kwargs, _pynative_outputs))

    def on_epoch_end(self, args: Any, state: Any, **kwargs: Any) -> None:
        step = int(state.global_step)
        self.epoch_ended(step // max(int(state.epoch_step or 0), 1), step)

    def _end(self, failure: str | None) -> None:
        if not self._finished:
            self._finished = True
            atexit.unregister(self._end_at_exit)
            self.train_ended(failure)

    def _end_at_exit(self) -> None:
        """At exit when the trainer never called on_train_end: the run still gets its status."""
        self._end("the process exited before training ended")


def _classic_outputs(cb_params: Any, step: int) -> Any:
    return cb_params.net_outputs


def _classic_start(run_context: Any) -> TrainStart:
    cb_params = run_context.original_args()
    config = running_config.find_running_config()
    data_parallel = running_config.get_path(config.config, "parallel_config.data_parallel") if config else None
    topology = current_topology(data_parallel=data_parallel if isinstance(data_parallel, int) else None)
    network = cb_params.get("network")
    facts = read_model_facts(cb_params, topology)
    if config is not None and config.global_batch_size:  # as the trainer computed it, whatever the layout
        facts.samples_per_step = float(config.global_batch_size)
    steps_per_epoch, epochs = cb_params.get("batch_num"), cb_params.get("epoch_num")
    final_step = None
    if isinstance(steps_per_epoch, int) and isinstance(epochs, int):  # counted from cur_step_num's zero
        begun = int(cb_params.get("cur_step_num") or 0)  # the whole epochs a resume starts after
        final_step = facts.initial_global_step - begun + steps_per_epoch * epochs
        # a resume's first epoch starts where the data skip puts it, and is that much shorter
        skipped = running_config.data_skip_steps(config.config if config else None, facts.initial_global_step)
        final_step -= max(skipped - begun, 0)
    return TrainStart(
        trainer=CLASSIC,
        facts=facts,
        topology=topology,
        network=network if network is not None else cb_params.get("train_network"),
        train_network=cb_params.get("train_network"),
        epochs=epochs,
        final_step=final_step,
        checkpoint=cb_params.get("latest_ckpt_file"),
        eval_callbacks=cb_params.get("list_callback"),
        config=config,
        hook_args=cb_params,
        request_stop=run_context.request_stop,
        training=cb_params,
        steps_per_epoch=steps_per_epoch if isinstance(steps_per_epoch, int) else None,
    )


def _pynative_start(args: Any, state: Any, kwargs: Mapping[str, Any]) -> TrainStart:
    config = _as_mapping(args)
    topology = pynative_topology(config)
    models = kwargs.get("model")
    models = list(models) if isinstance(models, (list, tuple)) else [models]
    batch = int(getattr(state, "global_batch_size", 0) or 0)
    facts = ModelFacts(
        optimizer=kwargs.get("optimizer"),
        trainable_params=[param for model in models if model is not None for param in trainable_params_of(model)],
        initial_global_step=int(state.global_step),
        samples_per_step=float(batch) if batch else None,
        tokens_per_sample=_seq_length(args),
    )

    def stop_after_this_step() -> None:
        state.max_steps = int(state.global_step)  # the trainer loops while global_step < max_steps

    return TrainStart(
        trainer=PYNATIVE,
        facts=facts,
        topology=topology,
        network=models[0] if len(models) == 1 else None,
        train_network=None,
        epochs=None,
        final_step=int(getattr(state, "max_steps", 0) or 0) or None,
        checkpoint=running_config.get_path(config, "checkpoint.load_path") or None,
        eval_callbacks=None,
        config=running_config.RunningConfig(config, batch or None) if config else None,
        hook_args=kwargs,
        request_stop=stop_after_this_step,
        training=state,
    )


def _pynative_outputs(kwargs: Mapping[str, Any], step: int) -> tuple[Any, ...]:
    """MindFormers' wrapper layout from the PyNative trainer's step values: no loss scaling there."""
    scheduler = kwargs.get("lr_scheduler")
    lr = _learning_rate(scheduler, step) if scheduler is not None else None
    return (kwargs.get("loss"), None, None, lr, kwargs.get("grad_norm"))


def pynative_topology(config: Mapping[str, Any]) -> Topology:
    """The PyNative trainer's layout, from its config's ``parallelism``: the pipeline stages, and the
    data-parallel size it wrote there at start (else: a replica is tensor x context parallel ranks, as
    it computes the size)."""

    def size(key: str) -> int:
        value = running_config.get_path(config, f"parallelism.{key}")
        return value if isinstance(value, int) and value > 0 else 1

    written = running_config.get_path(config, "parallelism.data_parallel")
    data_parallel = written if isinstance(written, int) and written > 0 else None
    topology = current_topology(size("pipeline_parallel"), data_parallel, layout=PYNATIVE_LAYOUT)
    if data_parallel is None and topology.world_size > 1:
        topology = replace(topology, ranks_per_replica=size("tensor_parallel") * size("context_parallel"))
    return topology


def _learning_rate(scheduler: Any, step: int) -> Any:
    """What LossCallback prints: the schedule called with the finished step's ``global_step``."""
    return scheduler(step) if callable(scheduler) else None


def _seq_length(args: Any) -> int | None:
    config = _as_mapping(args)
    for path in ("model.seq_length", "model.model_config.seq_length", "training.seq_length"):
        value = running_config.get_path(config, path)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _as_mapping(config: Any) -> Mapping[str, Any]:
    if isinstance(config, Mapping):
        return config
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        try:
            return to_dict()
        except Exception:  # a half-built config object
            return {}
    return {}
