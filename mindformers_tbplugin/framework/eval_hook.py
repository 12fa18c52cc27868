"""Evaluation results during training (MindFormers ``do_eval``) as ``eval/*`` scalars.

MindFormers evaluates in training through its ``EvalCallBack``: every ``eval_step_interval`` steps
(or ``eval_epoch_interval`` epochs) it calls ``eval_func`` (``Model.eval`` on the eval dataset) and
only logs the result, e.g. ``{'PerplexityMetric': {'loss': 5.3, 'PPL': 205.2}}``. We wrap that
callback's ``eval_func`` at train begin so each result is also handed to the monitor, at the training
step it belongs to, and restore it at train end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline.metrics import EVAL_LOSS, EVAL_PERPLEXITY, EVAL_PREFIX

_LOSS_KEYS = {"loss", "eval_loss"}
_PERPLEXITY_KEYS = {"ppl", "perplexity"}
_MAX_EXP_ARG = 700.0  # math.exp overflows a float beyond ~709


def _tag_part(name: str) -> str:
    return str(name).strip().replace(" ", "_").lower()


def eval_scalars(output: Any) -> dict[str, float]:
    """``{eval/...: value}`` from a ``Model.eval`` result ``{metric name: number or {key: number}}``.

    Any loss becomes ``eval/loss`` and any perplexity ``eval/perplexity`` (derived from the loss when
    no metric reports it); other values become ``eval/<metric>`` or ``eval/<metric>/<key>``.
    """
    values: dict[str, float] = {}
    if not isinstance(output, Mapping):
        return values
    for metric_name, result in output.items():
        items = result.items() if isinstance(result, Mapping) else [("", result)]
        for key, value in items:
            number = _number(value)
            if number is None:
                continue
            part = _tag_part(key or metric_name)
            if part in _LOSS_KEYS:
                values[EVAL_LOSS] = number
            elif part in _PERPLEXITY_KEYS:
                values[EVAL_PERPLEXITY] = number
            else:
                suffix = f"{_tag_part(metric_name)}/{part}" if key else part
                values[EVAL_PREFIX + suffix] = number
    loss = values.get(EVAL_LOSS)
    if EVAL_PERPLEXITY not in values and loss is not None and loss < _MAX_EXP_ARG:
        values[EVAL_PERPLEXITY] = math.exp(loss)
    return values


def _number(value: Any) -> float | None:
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    if hasattr(value, "size") and getattr(value, "size", 1) != 1:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class EvalRecorder:
    """Wraps the ``eval_func`` of MindFormers' EvalCallBack(s) found among the training's callbacks."""

    def __init__(self, on_result: Callable[[dict[str, float]], None]) -> None:
        self._on_result = on_result
        self._wrapped: list[tuple[Any, Callable[..., Any]]] = []

    def attach(self, callbacks: Any) -> int:
        """Wrap every EvalCallBack in ``callbacks`` (cb_params.list_callback). Returns how many."""
        for callback in list(callbacks or []):
            original = getattr(callback, "eval_func", None)
            if type(callback).__name__ != "EvalCallBack" or not callable(original):
                continue
            callback.eval_func = self._recording(original)
            self._wrapped.append((callback, original))
        return len(self._wrapped)

    def detach(self) -> None:
        """Give the callbacks their own ``eval_func`` back."""
        for callback, original in self._wrapped:
            callback.eval_func = original
        self._wrapped.clear()

    def _recording(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def recording_eval(*args: Any, **kwargs: Any) -> Any:
            output = original(*args, **kwargs)
            try:
                values = eval_scalars(output)
                if values:
                    self._on_result(values)
            except Exception as exc:  # recording must never break the evaluation
                logger.warning("could not record the evaluation result %r: %r", output, exc)
            return output

        return recording_eval
