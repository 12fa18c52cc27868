"""Per-step errors of alignment/step_errors.py, against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mindformers_tbplugin.alignment.step_errors import rounding_threshold, step_error, step_errors


def test_step_error_by_hand():
    # |2.53 - 2.5| = 0.03, 0.03 / 2.5 = 0.012
    abs_err, rel_err = step_error(2.53, 2.5)
    assert abs_err == pytest.approx(0.03)
    assert rel_err == pytest.approx(0.012)
    # the sign does not matter: |2.47 - 2.5| / 2.5 = 0.012
    assert step_error(2.47, 2.5) == pytest.approx((0.03, 0.012))


def test_an_error_inside_the_printed_rounding_is_no_error():
    # a baseline printed with 3 decimals (resolution 0.001) against a full-precision run: +-0.0005
    threshold = rounding_threshold(0.0, 0.001)
    assert threshold == pytest.approx(0.0005)
    assert step_error(2.5004, 2.500, threshold) == (0.0, 0.0)
    abs_err, rel_err = step_error(2.5006, 2.500, threshold)
    assert abs_err == pytest.approx(0.0006)
    assert rel_err == pytest.approx(0.0006 / 2.5)
    # both printed with 3 decimals: up to 0.001 apart by rounding alone
    assert rounding_threshold(0.001, 0.001) == pytest.approx(0.001)


def test_zero_baseline_has_no_relative_error_unless_equal():
    assert step_error(0.0, 0.0) == (0.0, 0.0)
    abs_err, rel_err = step_error(1e-5, 0.0)
    assert abs_err == pytest.approx(1e-5)
    assert math.isnan(rel_err)


def test_arrays_match_the_scalar_function():
    run = np.array([2.53, 2.47, 0.0, 1e-5, 2.5004, 4.0])
    base = np.array([2.5, 2.5, 0.0, 0.0, 2.5, -2.0])
    abs_err, rel_err = step_errors(run, base, threshold=0.0005)
    for i in range(len(run)):
        expected = step_error(float(run[i]), float(base[i]), 0.0005)
        assert abs_err[i] == pytest.approx(expected[0])
        assert rel_err[i] == pytest.approx(expected[1], nan_ok=True)
    # |4 - (-2)| / |-2| = 3
    assert rel_err[5] == pytest.approx(3.0)
