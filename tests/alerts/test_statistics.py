"""RollingWindow: the rolling median and MAD the spike, throughput_drop and stall rules rest on."""

from __future__ import annotations

import random
import statistics

import pytest

from mindformers_tbplugin.alerts.statistics import RollingWindow


def test_rolling_median_and_mad_match_statistics() -> None:
    rng = random.Random(3)
    for size in (1, 2, 3, 10, 51):
        window, values = RollingWindow(size), []
        for _ in range(200):
            value = rng.choice([rng.random(), float(rng.randint(0, 3))])
            window.add(value)
            values.append(value)
            recent = values[-size:]
            median = statistics.median(recent)
            assert window.median() == pytest.approx(median)
            assert window.mad(median) == pytest.approx(statistics.median(abs(v - median) for v in recent))


def test_the_oldest_value_leaves_first_and_the_size_holds() -> None:
    window = RollingWindow(3)
    for value in (100.0, 1.0, 2.0):
        window.add(value)
    assert (len(window), window.median()) == (3, 2.0)
    window.add(3.0)  # 100 leaves, not the largest-but-newest
    assert (len(window), window.median()) == (3, 2.0)
    window.add(4.0)
    assert window.median() == 3.0


def test_mad_around_a_center_that_is_not_in_the_window() -> None:
    window = RollingWindow(5)
    for value in (1.0, 2.0, 4.0, 8.0, 16.0):
        window.add(value)
    for center in (-3.0, 0.0, 5.0, 100.0):
        expected = statistics.median(abs(v - center) for v in (1.0, 2.0, 4.0, 8.0, 16.0))
        assert window.mad(center) == pytest.approx(expected)


def test_repeated_values_are_evicted_one_at_a_time() -> None:
    window = RollingWindow(4)
    for value in (7.0, 7.0, 7.0, 1.0, 1.0, 1.0):
        window.add(value)
    assert window.median() == 1.0  # window: 7, 1, 1, 1
    assert window.mad(1.0) == 0.0
