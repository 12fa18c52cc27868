"""The one moment every release lets a training's YAML config be changed before MindFormers builds from it.

Every supported release loads a training config in one of two places, whatever script starts it:

* the classic trainer (MindFormers 1.7 to 2.x: ``run_mindformer.py``, ``mftb train``, a user's script):
  ``MindFormerConfig(path, **overrides)`` merges the file, its ``_base_`` files and the keyword overrides
  (``run_mindformer.py --run_mode``) into one plain dict and hands it to ``ConfigTemplate.apply_template``,
  which fills MindFormers' own defaults (``callbacks`` always starts with MFLossMonitor) before the
  config object exists;
* MindFormers 2.x's PyNative trainer (and 1.9's preview of it): ``TrainConfig.from_dict``, for a YAML path
  (``load_from_yaml``) or a dict, before its callbacks become ``CallbackConfig`` objects.

:func:`complete_training_configs` wraps both, so a function sees each training config's plain dict first
and may change it. The classic loader also reads model, processor and evaluation configs: only those with
a training ``run_mode`` are handed on.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

from mindformers_tbplugin.framework.mindformers_api import resolve

TRAINING_RUN_MODES = ("train", "finetune")
_WRAPPED = "__mftb_completes__"  # marks a loader already wrapped: installing twice changes nothing


def is_classic_training(document: Mapping[str, Any]) -> bool:
    """A classic-trainer config that trains (``run_mindformer.py`` and ``mftb train`` train only these)."""
    return document.get("run_mode") in TRAINING_RUN_MODES


def is_pynative_training(document: Mapping[str, Any]) -> bool:
    """A config of MindFormers 2.x's PyNative trainer: its ``training`` and ``parallelism`` sections (the
    classic trainer's are ``runner_config`` and ``parallel_config``)."""
    training = document.get("training")
    return (
        isinstance(training, dict) and "global_batch_size" in training and isinstance(document.get("parallelism"), dict)
    )


def complete_training_configs(complete: Callable[[dict], None]) -> list[str]:
    """Have ``complete(document)`` change every training config loaded from now on, before MindFormers reads
    it. Returns the loaders wrapped (the PyNative one only where the release has that trainer). Idempotent."""
    wrapped = []
    # The template changes the merged dict in place (it is MindFormers' own); from_dict may be given the
    # caller's dict (Trainer(config=dict)), which is completed as a copy.
    if _wrap(resolve("ConfigTemplate"), "apply_template", is_classic_training, complete, in_place=True):
        wrapped.append("ConfigTemplate.apply_template")
    try:
        train_config = resolve("TrainConfig")
    except ImportError:  # a release without the PyNative trainer
        return wrapped
    if _wrap(train_config, "from_dict", lambda data: isinstance(data, dict), complete, in_place=False):
        wrapped.append("TrainConfig.from_dict")
    return wrapped


def _wrap(
    owner: type, name: str, applies: Callable[[Any], bool], complete: Callable[[dict], None], in_place: bool
) -> bool:
    """Replace the classmethod ``owner.name(data, ...)`` with one that runs ``complete`` on ``data`` (or on a
    copy of it) first. Set on ``owner`` itself: the base class's method (``BaseConfig.from_dict`` of every
    nested section) stays."""
    bound = getattr(owner, name)
    if getattr(bound, _WRAPPED, False):
        return True
    original = bound.__func__

    @functools.wraps(original)
    def completing(cls: type, data: Any, *args: Any, **kwargs: Any) -> Any:
        if cls is owner and applies(data):
            data = data if in_place else copy.deepcopy(data)
            complete(data)
        return original(cls, data, *args, **kwargs)

    setattr(completing, _WRAPPED, True)
    setattr(owner, name, classmethod(completing))
    return True
