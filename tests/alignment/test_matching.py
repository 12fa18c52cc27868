"""Which points are compared (alignment/matching.py), worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from mindformers_tbplugin.alignment.matching import align


def test_per_step_series_are_compared_at_their_common_steps():
    aligned = align({1: 2.0, 2: 1.9, 3: 1.8, 5: 1.5}, {2: 2.0, 3: 1.7, 4: 1.6, 5: 1.4})
    assert aligned.steps.tolist() == [2, 3, 5]
    assert aligned.spans.tolist() == [1, 1, 1]
    assert aligned.run.tolist() == [1.9, 1.8, 1.5]
    assert aligned.base.tolist() == [2.0, 1.7, 1.4]


def test_a_baseline_of_means_is_compared_with_the_runs_mean_over_the_same_steps():
    run = {step: float(step) for step in range(1, 21)}  # 1.0 .. 20.0
    base = {10: 5.0, 20: 16.0}  # means over 10 steps, as Megatron-LM prints them
    aligned = align(run, base, base_window=10)
    assert aligned.steps.tolist() == [10, 20]
    assert aligned.spans.tolist() == [10, 10]
    # mean(1..10) = 5.5, mean(11..20) = 15.5
    assert aligned.run == pytest.approx([5.5, 15.5])
    assert aligned.base.tolist() == [5.0, 16.0]


def test_a_window_the_run_does_not_cover_whole_is_not_compared():
    run = {step: 1.0 for step in range(1, 21) if step != 14}
    aligned = align(run, {10: 1.0, 20: 1.0}, base_window=10)
    assert aligned.steps.tolist() == [10]


def test_a_run_logged_every_fifth_step_cannot_form_means_over_ten():
    run = {step: 1.0 for step in range(5, 101, 5)}
    assert len(align(run, {10: 1.0, 20: 1.0}, base_window=10).steps) == 0


def test_two_series_of_means_over_different_intervals_meet_on_their_common_windows():
    run = {5: 1.0, 10: 3.0, 15: 5.0, 20: 7.0}  # means over 5 steps
    base = {10: 2.5, 20: 6.0}  # means over 10 steps
    aligned = align(run, base, run_window=5, base_window=10)
    assert aligned.steps.tolist() == [10, 20]
    assert aligned.spans.tolist() == [10, 10]
    # (1 + 3) / 2 = 2, (5 + 7) / 2 = 6
    assert aligned.run == pytest.approx([2.0, 6.0])
    assert aligned.base.tolist() == [2.5, 6.0]


def test_a_baseline_logged_every_tenth_step_is_compared_at_those_steps():
    run = {step: step / 10 for step in range(1, 31)}
    base = {10: 0.9, 20: 2.1, 30: 3.0}  # each step's own value, printed every 10 steps
    aligned = align(run, base)
    assert aligned.steps.tolist() == [10, 20, 30]
    assert aligned.run.tolist() == [1.0, 2.0, 3.0]


def test_values_compared_as_they_are_when_a_span_is_one_points_window():
    values = np.random.default_rng(0).normal(2.0, 0.5, 1000)
    run = {i + 1: float(v) for i, v in enumerate(values)}
    aligned = align(run, dict(run))
    assert np.array_equal(aligned.run, values) and np.array_equal(aligned.base, values)


def test_empty():
    assert len(align({}, {1: 1.0}).steps) == 0
