"""What "the run matches its baseline" means: tolerances per tag, two built-ins, and YAML files of others.

``mindformers``: MindFormers' large model migration precision standard (the precision tuning guide,
docs/mindformers/docs/source_en/advanced_development/precision_optimization.md in
github:mindspore-ai/docs, "Large Model Migration Precision Standard"): the first step's loss absolute
error < 0.005 or relative error < 0.5%; the mean loss absolute error < 0.01 or mean relative error < 1%;
the global norm's mean relative error <= 10%; observed over 5000 steps or 12 hours, not fewer than 1000.

``megatron-ci``: Megatron-LM's functional tests' golden-value check
(tests/functional_tests/python_test_utils/common.py and test_pretraining_regular_pipeline.py in
github:NVIDIA/Megatron-LM): every step's ``lm loss`` within ``numpy.isclose(rtol=0.05, atol=0)`` of the
golden value, with min(max(steps // 100, 1), 50) steps allowed to fail.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.pipeline import metrics


@dataclass(frozen=True)
class Bounds:
    """Tolerances of one error (the first step's, or the mean): met when ANY bound given holds
    (the standard's "absolute error < 0.005, or relative error < 0.5%")."""

    abs_lt: float | None = None
    abs_le: float | None = None
    rel_lt: float | None = None
    rel_le: float | None = None

    def holds(self, abs_err: Any, rel_err: Any) -> Any:
        """Whether the errors (floats, or arrays element-wise) are within; a NaN relative error is not."""
        checks = []
        if self.abs_lt is not None:
            checks.append(abs_err < self.abs_lt)
        if self.abs_le is not None:
            checks.append(abs_err <= self.abs_le)
        if self.rel_lt is not None:
            checks.append(rel_err < self.rel_lt)
        if self.rel_le is not None:
            checks.append(rel_err <= self.rel_le)
        result = checks[0]
        for check in checks[1:]:
            result = result | check
        return result

    def describe(self) -> str:
        parts = [
            f"{kind} {op} {_number(value, percent=kind == 'rel')}"
            for kind, op, value in (
                ("abs", "<", self.abs_lt),
                ("abs", "<=", self.abs_le),
                ("rel", "<", self.rel_lt),
                ("rel", "<=", self.rel_le),
            )
            if value is not None
        ]
        return " or ".join(parts)


@dataclass(frozen=True)
class PerStep:
    """Megatron CI's per-step check: |run - base| <= atol + rtol * |base| at every compared step, with
    ``allowed_failures`` steps that may miss it (None: Megatron's min(max(steps // 100, 1), 50))."""

    rtol: float
    atol: float = 0.0
    allowed_failures: int | None = None

    def close(self, run: np.ndarray, base: np.ndarray, threshold: float = 0.0) -> np.ndarray:
        return np.abs(run - base) <= self.atol + self.rtol * np.abs(base) + threshold

    def failures_allowed(self, steps: int) -> int:
        if self.allowed_failures is not None:
            return self.allowed_failures
        return 0 if steps <= 1 else min(max(steps // 100, 1), 50)

    def describe(self) -> str:
        allowed = "min(max(steps // 100, 1), 50)" if self.allowed_failures is None else str(self.allowed_failures)
        return (
            f"|run - base| <= {_number(self.atol)} + {_number(self.rtol)} x |base| per step, {allowed} steps may fail"
        )


@dataclass(frozen=True)
class TagCriteria:
    first_step: Bounds | None = None
    mean: Bounds | None = None
    per_step: PerStep | None = None

    def divergent(self, run: np.ndarray, base: np.ndarray, abs_err: np.ndarray, rel_err: np.ndarray) -> np.ndarray:
        """Steps over the first-step tolerance both absolutely and relatively (else over the per-step
        tolerance, else over the mean's): where a run starts to leave its baseline."""
        if self.first_step is not None:
            return ~self.first_step.holds(abs_err, rel_err)
        if self.per_step is not None:
            return abs_err > self.per_step.atol + self.per_step.rtol * np.abs(base)
        if self.mean is not None:
            return ~self.mean.holds(abs_err, rel_err)
        return np.zeros(len(abs_err), dtype=bool)


@dataclass(frozen=True)
class NoiseRule:
    """How a run is judged inside its baseline's own spread (``--noise``): within it when at least
    ``within_fraction`` of the compared steps have |run - base| at most the largest |baseline2 - base|
    of the ``window`` compared steps either side; around 0 when |mean(run - base)| is at most
    ``bias_factor`` x mean |baseline2 - base|."""

    window: int = 10
    within_fraction: float = 0.9
    bias_factor: float = 1.0


@dataclass(frozen=True)
class Criteria:
    name: str
    source: str
    tags: dict[str, TagCriteria]
    min_steps: int | None = None
    recommended_steps: int | None = None
    recommended_hours: float | None = None
    noise: NoiseRule = field(default_factory=NoiseRule)


MINDFORMERS = Criteria(
    name="mindformers",
    source=(
        "MindFormers' large model migration precision standard (precision tuning guide, "
        "docs/mindformers/docs/source_en/advanced_development/precision_optimization.md, github:mindspore-ai/docs)"
    ),
    tags={
        metrics.TRAIN_LOSS: TagCriteria(
            first_step=Bounds(abs_lt=0.005, rel_lt=0.005), mean=Bounds(abs_lt=0.01, rel_lt=0.01)
        ),
        metrics.TRAIN_GRAD_NORM: TagCriteria(mean=Bounds(rel_le=0.10)),
    },
    min_steps=1000,
    recommended_steps=5000,
    recommended_hours=12.0,
)

MEGATRON_CI = Criteria(
    name="megatron-ci",
    source=(
        "Megatron-LM's functional tests' golden values (tests/functional_tests/python_test_utils/common.py, "
        "test_pretraining_regular_pipeline.py, github:NVIDIA/Megatron-LM): lm loss, rtol 0.05"
    ),
    tags={metrics.TRAIN_LOSS: TagCriteria(per_step=PerStep(rtol=0.05, atol=0.0))},
)

BUILTIN = {criteria.name: criteria for criteria in (MINDFORMERS, MEGATRON_CI)}


def load_criteria(name_or_file: str) -> Criteria:
    """A built-in by name, else a YAML file of tolerances (docs/alignment.md), checked key by key."""
    if name_or_file in BUILTIN:
        return BUILTIN[name_or_file]
    path = Path(name_or_file).expanduser()
    if not path.is_file():
        raise UsageError(
            f"--criteria {name_or_file}: neither a built-in ({', '.join(BUILTIN)}) nor a file of tolerances"
        )
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: not a readable YAML file of tolerances: {exc}") from exc
    return _Parser(path, _lines(node)).criteria(data)


_BOUND_KEYS = ("abs_lt", "abs_le", "rel_lt", "rel_le")
_PER_STEP_KEYS = ("rtol", "atol", "allowed_failures")
_TAG_KEYS = ("first_step", "mean", "per_step")
_NOISE_KEYS = ("window", "within_fraction", "bias_factor")
_TOP_KEYS = ("name", "source", "tags", "min_steps", "recommended_steps", "recommended_hours", "noise")


def _lines(node: yaml.Node | None, path: str = "") -> dict[str, int]:
    """The 1-based line of every key path in the document (``tags.train/loss.mean``)."""
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = f"{path}.{key.value}" if path else str(key.value)
            lines[sub] = key.start_mark.line + 1
            lines.update(_lines(value, sub))
    return lines


class _Parser:
    """Builds ``Criteria`` from a YAML document; every problem names the file, line, key and what is allowed."""

    def __init__(self, path: Path, lines: dict[str, int]) -> None:
        self.path = path
        self.lines = lines

    def fail(self, key: str, message: str) -> UsageError:
        line = self.lines.get(key)
        at = f"{self.path}:{line}" if line else str(self.path)
        return UsageError(f"{at}: {key or 'the document'}: {message}")

    def mapping(self, value: Any, key: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping with keys among {', '.join(allowed)}, got {value!r}")
        for name in value:
            if name not in allowed:
                close = difflib.get_close_matches(str(name), allowed, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise self.fail(_join(key, name), f"unknown key{hint}; allowed: {', '.join(allowed)}")
        for name in required:
            if name not in value:
                raise self.fail(key, f"missing the key {name}")
        return value

    def number(
        self, value: Any, key: str, check: Callable[[float], bool] = lambda x: x >= 0, what: str = ">= 0"
    ) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not check(value)
        ):
            raise self.fail(key, f"expected a number {what}, got {value!r}")
        return float(value)

    def integer(self, value: Any, key: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"expected a text, got {value!r}")
        return value

    def optional(self, data: dict, key: str, name: str, read: Callable[[Any, str], Any]) -> Any:
        return read(data[name], _join(key, name)) if name in data and data[name] is not None else None

    def bounds(self, value: Any, key: str) -> Bounds:
        data = self.mapping(value, key, _BOUND_KEYS)
        if not data:
            raise self.fail(key, f"give at least one of {', '.join(_BOUND_KEYS)}")
        return Bounds(**{name: self.number(data[name], _join(key, name)) for name in data})

    def per_step(self, value: Any, key: str) -> PerStep:
        data = self.mapping(value, key, _PER_STEP_KEYS, required=("rtol",))
        return PerStep(
            rtol=self.number(data["rtol"], _join(key, "rtol")),
            atol=self.optional(data, key, "atol", self.number) or 0.0,
            allowed_failures=self.optional(data, key, "allowed_failures", lambda v, k: self.integer(v, k, 0)),
        )

    def tag(self, value: Any, key: str) -> TagCriteria:
        data = self.mapping(value, key, _TAG_KEYS)
        if not data:
            raise self.fail(key, f"give at least one of {', '.join(_TAG_KEYS)}")
        return TagCriteria(
            first_step=self.optional(data, key, "first_step", self.bounds),
            mean=self.optional(data, key, "mean", self.bounds),
            per_step=self.optional(data, key, "per_step", self.per_step),
        )

    def noise(self, value: Any, key: str) -> NoiseRule:
        data = self.mapping(value, key, _NOISE_KEYS)
        defaults = NoiseRule()
        fraction = self.optional(
            data, key, "within_fraction", lambda v, k: self.number(v, k, lambda x: 0 < x <= 1, "in (0, 1]")
        )
        return NoiseRule(
            window=_default(self.optional(data, key, "window", lambda v, k: self.integer(v, k, 0)), defaults.window),
            within_fraction=defaults.within_fraction if fraction is None else fraction,
            bias_factor=_default(self.optional(data, key, "bias_factor", self.number), defaults.bias_factor),
        )

    def criteria(self, data: Any) -> Criteria:
        data = self.mapping(data, "", _TOP_KEYS, required=("tags",))
        tags = data["tags"]
        if not isinstance(tags, dict) or not tags:
            raise self.fail(
                "tags",
                f"expected a mapping of tags to rules, e.g. train/loss: {{mean: {{abs_lt: 0.01}}}}, got {tags!r}",
            )
        return Criteria(
            name=self.optional(data, "", "name", self.text) or self.path.stem,
            source=self.optional(data, "", "source", self.text) or str(self.path),
            tags={str(tag): self.tag(rules, _join("tags", tag)) for tag, rules in tags.items()},
            min_steps=self.optional(data, "", "min_steps", lambda v, k: self.integer(v, k, 1)),
            recommended_steps=self.optional(data, "", "recommended_steps", lambda v, k: self.integer(v, k, 1)),
            recommended_hours=self.optional(data, "", "recommended_hours", self.number),
            noise=self.optional(data, "", "noise", self.noise) or NoiseRule(),
        )


def _join(key: str, name: Any) -> str:
    return f"{key}.{name}" if key else str(name)


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _number(value: float, percent: bool = False) -> str:
    return f"{value * 100:g}%" if percent else f"{value:g}"
