"""Hugging Face Trainer's ``trainer_state.json`` (the usual GPU baseline of a fine-tune: LLaMA-Factory,
TRL): its ``log_history``, one entry per ``Trainer.log`` call, each ``{**logs, "step": global_step}``.

From transformers' trainer.py: a training entry holds ``loss`` (the mean over the steps since the
previous log, ``round(..., 4)``), ``grad_norm`` and ``learning_rate`` (the step's own) and ``epoch``;
an evaluation entry ``eval_loss`` and other ``eval_*`` metrics; the last entry ``train_loss``,
``train_runtime``, ``total_flos``... The file is ``TrainerState.save_to_json``:
``json.dumps(asdict(state), indent=2, sort_keys=True)``.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.imported_run import ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline import metrics as m

NAME = "hf-trainer-state"
TAGS = {"loss": m.TRAIN_LOSS, "grad_norm": m.TRAIN_GRAD_NORM, "learning_rate": m.TRAIN_LR}
EVAL_PREFIX = "eval_"
LOSS_DECIMALS = 4  # Trainer rounds the logged loss to 4 decimals
MAX_LISTED = 5


def sniff(path: Path, head: bytes) -> bool:
    return head.lstrip()[:1] == b"{" and b'"log_history"' in head


def read(files: list[Path]) -> ImportedRun:
    """One run from a ``trainer_state.json`` (several files of one folder: the last, by name)."""
    path = files[-1]
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable trainer_state.json ({exc})") from exc
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise UsageError(f"{path}: its log_history is not a list")
    run = ImportedRun(source=[path], format=NAME)
    unusable: list[int] = []
    loss_steps: list[int] = []
    for index, entry in enumerate(history):
        step = entry.get("step") if isinstance(entry, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            unusable.append(index)
            continue
        for key, value in entry.items():
            if key == "step" or not _is_number(value):
                continue
            run.add(_tag(key), step, float(value))
            if key == "loss":
                loss_steps.append(step)
    if unusable:
        listed = ", ".join(map(str, unusable[:MAX_LISTED])) + (" ..." if len(unusable) > MAX_LISTED else "")
        run.skipped.append(f"{len(unusable)} log_history entries without an integer step (entries {listed})")
    interval = _logging_interval(state, loss_steps)
    if interval > 1 and m.TRAIN_LOSS in run.scalars:
        run.averaged_over[m.TRAIN_LOSS] = interval
    if m.TRAIN_LOSS in run.scalars:
        run.resolution[m.TRAIN_LOSS] = 10.0**-LOSS_DECIMALS
    return run


def _tag(key: str) -> str:
    if key in TAGS:
        return TAGS[key]
    if key.startswith(EVAL_PREFIX):
        return m.EVAL_PREFIX + key.removeprefix(EVAL_PREFIX)
    return m.IMPORT_PREFIX + key


def _is_number(value: object) -> bool:
    """A number (NaN and infinities included: a NaN loss is what a comparison must see)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _logging_interval(state: dict, loss_steps: list[int]) -> int:
    """The steps each logged loss is a mean of: the state's ``logging_steps`` when it records an
    integer, else the most common gap between logged steps."""
    recorded = state.get("logging_steps")
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
        return recorded
    return logging_interval(loss_steps)


def logging_interval(loss_steps: list[int]) -> int:
    """The most common gap between the steps a Trainer logged its loss at (its ``logging_steps``)."""
    gaps = Counter(b - a for a, b in pairwise(sorted(loss_steps)) if b > a)
    return gaps.most_common(1)[0][0] if gaps else 1


FORMAT = SourceFormat(
    name=NAME,
    description="Hugging Face Trainer trainer_state.json (log_history)",
    sniff=sniff,
    read=read,
)
