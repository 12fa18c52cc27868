"""The built-in criteria say what their sources say; a YAML file of tolerances is read and checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mindformers_tbplugin.alignment.criteria import MEGATRON_CI, MINDFORMERS, Bounds, PerStep, load_criteria
from mindformers_tbplugin.errors import UsageError


def test_mindformers_standard_thresholds():
    loss = MINDFORMERS.tags["train/loss"]
    # first-step loss: abs < 0.005 or rel < 0.5%
    assert loss.first_step.holds(0.0049, 0.9)
    assert loss.first_step.holds(0.9, 0.0049)
    assert not loss.first_step.holds(0.005, 0.005)
    # mean loss: abs < 0.01 or rel < 1%
    assert loss.mean.holds(0.0099, 1.0) and loss.mean.holds(1.0, 0.0099)
    assert not loss.mean.holds(0.01, 0.01)
    # global norm: mean relative error does not exceed 10%
    norm = MINDFORMERS.tags["train/grad_norm"].mean
    assert norm.holds(np.inf, 0.10) and not norm.holds(0.0, 0.1001)
    assert (MINDFORMERS.min_steps, MINDFORMERS.recommended_steps, MINDFORMERS.recommended_hours) == (1000, 5000, 12)


def test_megatron_ci_per_step_rule():
    rule = MEGATRON_CI.tags["train/loss"].per_step
    base = np.array([10.0, 10.0, 10.0])
    # numpy.isclose(rtol=0.05, atol=0): |a - b| <= 0.05 * |b| = 0.5
    assert rule.close(np.array([10.5, 9.5, 10.51]), base).tolist() == [True, True, False]
    assert [rule.failures_allowed(n) for n in (1, 2, 99, 100, 250, 10_000)] == [0, 1, 1, 1, 2, 50]


def test_divergence_uses_the_first_step_tolerance_both_ways():
    loss = MINDFORMERS.tags["train/loss"]
    abs_err = np.array([0.001, 0.006, 0.006, 0.004])
    rel_err = np.array([0.001, 0.004, 0.006, 0.006])
    # over both abs 0.005 and rel 0.5% only at the third step
    assert loss.divergent(abs_err, abs_err, abs_err, rel_err).tolist() == [False, False, True, False]


def test_yaml_file(tmp_path: Path):
    path = tmp_path / "golden.yaml"
    path.write_text(
        "name: golden\nmin_steps: 10\ntags:\n  train/loss:\n    first_step: {abs_lt: 0.1}\n"
        "    per_step: {rtol: 0.02, allowed_failures: 0}\nnoise: {window: 5}\n"
    )
    criteria = load_criteria(str(path))
    assert criteria.name == "golden" and criteria.min_steps == 10
    assert criteria.tags["train/loss"].first_step == Bounds(abs_lt=0.1)
    assert criteria.tags["train/loss"].per_step == PerStep(rtol=0.02, atol=0.0, allowed_failures=0)
    assert criteria.noise.window == 5 and criteria.noise.within_fraction == 0.9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "tags:\n  train/loss:\n    mean: {abs_lt: -1}\n",
            ":3: tags.train/loss.mean.abs_lt: expected a number >= 0, got -1",
        ),
        (
            "tags:\n  train/loss:\n    mean: {abs_lst: 0.1}\n",
            "tags.train/loss.mean.abs_lst: unknown key (did you mean abs_lt?)",
        ),
        ("tags:\n  train/loss:\n    per_step: {atol: 0.1}\n", ":3: tags.train/loss.per_step: missing the key rtol"),
        ("tags: []\n", ":1: tags: expected a mapping of tags to rules"),
        ("tag: {}\n", "unknown key (did you mean tags?)"),
        ("tags:\n  train/loss: {}\n", "give at least one of first_step, mean, per_step"),
        ("tags:\n  train/loss:\n    mean: {rel_le: yes}\n", "expected a number >= 0, got True"),
        (
            "noise: {within_fraction: 2}\ntags:\n  train/loss: {mean: {rel_lt: 1}}\n",
            "noise.within_fraction: expected a number in (0, 1]",
        ),
        ("tags: {a: [\n", "not a readable YAML file"),
    ],
)
def test_yaml_problems_name_file_line_key_and_what_is_allowed(tmp_path: Path, text: str, message: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as error:
        load_criteria(str(path))
    assert str(error.value).startswith(str(path))
    assert message in str(error.value)


def test_unknown_name():
    with pytest.raises(UsageError, match="neither a built-in \\(mindformers, megatron-ci\\) nor a file"):
        load_criteria("mindformer")
