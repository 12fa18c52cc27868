"""A tag's errors and checks (alignment/comparison.py) and a run's verdict (run_comparison.py), by hand."""

from __future__ import annotations

import pytest

from mindformers_tbplugin.alignment.comparison import FIELDS
from mindformers_tbplugin.alignment.criteria import MEGATRON_CI, MINDFORMERS
from mindformers_tbplugin.alignment.report import as_json, as_text
from mindformers_tbplugin.alignment.run_comparison import compare_runs
from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.imported_run import ImportedRun


def _run(format_: str = "test", **series: dict[int, float]) -> ImportedRun:
    run = ImportedRun(source=[], format=format_)
    for name, points in series.items():
        run.scalars[name.replace("__", "/")] = points
    return run


BASE_LOSS = {1: 10.0, 2: 8.0, 3: 6.0, 4: 5.0}
RUN_LOSS = {1: 10.01, 2: 8.0, 3: 6.3, 4: 4.9}


def test_loss_fields_by_hand():
    result = compare_runs(_run(train__loss=RUN_LOSS), _run(train__loss=BASE_LOSS), MINDFORMERS)
    fields = result.tags["train/loss"].summary
    # abs errors 0.01, 0, 0.3, 0.1; rel errors 0.001, 0, 0.05, 0.02
    assert fields["steps"] == 4 and fields["first_step"] == 1
    assert fields["first_abs_err"] == pytest.approx(0.01)
    assert fields["first_rel_err"] == pytest.approx(0.001)
    assert fields["mean_abs_err"] == pytest.approx(0.41 / 4)
    assert fields["mean_rel_err"] == pytest.approx(0.071 / 4)
    assert fields["max_abs_err"] == pytest.approx(0.3)
    assert fields["max_rel_err"] == pytest.approx(0.05)
    assert fields["max_step"] == 3
    # over abs 0.005 and rel 0.5% both: step 3 (0.3, 5%); step 1 is within on rel (0.1%)
    assert fields["first_divergent_step"] == 3
    # first step within (rel 0.1% < 0.5%); mean abs 0.1025 >= 0.01 and mean rel 1.775% >= 1%: fail
    assert [c.ok for c in result.tags["train/loss"].checks] == [True, False]
    assert fields["pass"] is False and result.verdict == "fail"
    assert list(as_json(result, "r", "b")["tags"]["train/loss"]) == list(FIELDS)


def test_a_run_against_itself_passes_with_zero_errors():
    run = _run(train__loss=BASE_LOSS, train__grad_norm={1: 3.0, 2: 2.0}, train__lr={1: 0.0, 2: 1e-4})
    result = compare_runs(run, run, MINDFORMERS)
    assert list(result.tags) == ["train/loss", "train/grad_norm", "train/lr"]
    for comparison in result.tags.values():
        assert comparison.summary["max_abs_err"] == 0 and comparison.summary["mean_rel_err"] == 0
        assert comparison.summary["first_divergent_step"] is None
    assert result.tags["train/lr"].passed is None  # the standard has no tolerance for the learning rate
    assert result.verdict == "pass"
    # 4 steps: the standard's 1000-step rule is not met; --strict fails on it
    assert not result.step_rule.ok
    assert compare_runs(run, run, MINDFORMERS, strict=True).verdict == "fail"


def test_grad_norm_mean_relative_error_up_to_ten_percent():
    # binary fractions, so that the boundary is exact: each step 3/32 = 9.375% over the baseline
    base = _run(train__loss=BASE_LOSS, train__grad_norm={1: 1.0, 2: 2.0, 3: 4.0, 4: 8.0})
    run = _run(train__loss=BASE_LOSS, train__grad_norm={1: 1.09375, 2: 2.1875, 3: 4.375, 4: 8.75})
    norm = compare_runs(run, base, MINDFORMERS).tags["train/grad_norm"]
    assert norm.summary["mean_rel_err"] == 0.09375 and norm.passed
    # one step 12.5% over: mean (3 x 9.375% + 12.5%) / 4 = 10.15625% > 10%
    run.scalars["train/grad_norm"][4] = 9.0
    norm = compare_runs(run, base, MINDFORMERS).tags["train/grad_norm"]
    assert norm.summary["mean_rel_err"] == 0.1015625 and not norm.passed


def test_printed_resolution():
    base = _run(train__loss={1: 2.500, 2: 2.400})
    base.resolution["train/loss"] = 0.001  # 3 decimals
    run = _run(train__loss={1: 2.5004, 2: 2.4010})
    fields = compare_runs(run, base, MINDFORMERS).tags["train/loss"].summary
    # 0.0004 is inside the baseline's rounding (+-0.0005): no error; 0.001 is an error
    assert fields["first_abs_err"] == 0
    assert fields["max_abs_err"] == pytest.approx(0.001) and fields["max_step"] == 2


def test_megatron_baseline_of_means():
    base = _run(train__loss={5: 4.0, 10: 3.0})
    base.averaged_over["train/loss"] = 5
    run = _run(train__loss={s: 4.0 if s <= 5 else 3.03 for s in range(1, 11)})
    fields = compare_runs(run, base, MEGATRON_CI).tags["train/loss"].summary
    assert fields["steps"] == 2 and fields["max_abs_err"] == pytest.approx(0.03)
    assert fields["pass"] is True  # 1% is within rtol 0.05


def test_megatron_ci_allows_one_failing_step_in_a_hundred():
    base = {s: 2.0 for s in range(1, 101)}
    run = dict(base) | {50: 2.2}
    assert compare_runs(_run(train__loss=run), _run(train__loss=base), MEGATRON_CI).verdict == "pass"
    run[60] = 2.2
    assert compare_runs(_run(train__loss=run), _run(train__loss=base), MEGATRON_CI).verdict == "fail"


def test_noise_relaxes_the_standard_to_the_baselines_spread():
    import numpy as np

    rng = np.random.default_rng(1)
    truth = np.linspace(8, 2, 400)
    series = [{i + 1: float(v) for i, v in enumerate(truth + rng.normal(0, 0.05, 400))} for _ in range(3)]
    base, noise, run = (_run(train__loss=s) for s in series)
    # noisy beyond the standard (mean abs 0.056 > 0.01) but one more draw of the baseline's noise
    result = compare_runs(run, base, MINDFORMERS, noise=noise)
    assert result.tags["train/loss"].checks[1].ok is False
    assert result.noise["train/loss"].passed and result.verdict == "pass"
    # the same run shifted by 0.1: outside the spread, not around 0
    shifted = _run(train__loss={s: v + 0.1 for s, v in series[2].items()})
    judged = compare_runs(shifted, base, MINDFORMERS, noise=noise)
    assert not judged.noise["train/loss"].around_zero and judged.verdict == "fail"


def test_no_common_step_is_said_plainly():
    with pytest.raises(UsageError, match=r"no step in common.*run: 2 points at 1..2; baseline: 2 points at 5..6"):
        compare_runs(_run(train__loss={1: 1.0, 2: 1.0}), _run(train__loss={5: 1.0, 6: 1.0}), MINDFORMERS)


def test_different_global_batch_sizes_are_said_and_samples_compare():
    run = _run(train__loss={1: 3.0, 2: 2.0, 3: 2.5, 4: 1.5}, train__loss_vs_samples={8: 3.0, 16: 2.0, 24: 2.5, 32: 1.5})
    base = _run(train__loss={1: 2.5, 2: 2.0}, train__loss_vs_samples={16: 2.5, 32: 2.0})
    with pytest.raises(UsageError, match="8 samples per step and the baseline 16"):
        compare_runs(run, base, MINDFORMERS)
    fields = compare_runs(run, base, MINDFORMERS, axis="samples").tags["train/loss"].summary
    # the run's two steps of 8 samples against the baseline's one of 16: (3+2)/2 = 2.5, (2.5+1.5)/2 = 2.0
    assert fields["steps"] == 2 and fields["max_abs_err"] == 0
    with pytest.raises(UsageError, match="no train/loss_vs_tokens"):
        compare_runs(run, base, MINDFORMERS, axis="tokens")


def test_missing_tags():
    with pytest.raises(UsageError, match="the baseline has no train/loss"):
        compare_runs(_run(train__loss={1: 1.0}), _run(import__x={1: 1.0}), MINDFORMERS)
    with pytest.raises(UsageError, match="the run has no tag train/grad_norm"):
        compare_runs(_run(train__loss={1: 1.0}), _run(train__loss={1: 1.0}), MINDFORMERS, tags=["train/grad_norm"])


def test_report_shows_the_divergent_steps_neighbourhood():
    base = {s: 2.0 for s in range(1, 21)}
    run = {s: 2.0 if s < 12 else 2.5 for s in range(1, 21)}
    result = compare_runs(_run(train__loss=run), _run(train__loss=base), MINDFORMERS)
    text = as_text(result, "r", "b")
    assert "train/loss: first divergent step 12 and its neighbours:" in text
    block = text.split("its neighbours:")[1]
    assert [line.split()[0] for line in block.strip().splitlines()[1:8]] == ["9", "10", "11", ">12", "13", "14", "15"]
    markdown = as_text(result, "r", "b", markdown=True)
    assert markdown.startswith("## Run against its baseline: FAIL")
    assert "| mean_abs_err | 0.225 |" in markdown


def test_an_imported_run_compares_by_its_consumed_samples():
    # Megatron-LM: means over 2 iterations of 16 samples, printed with the samples consumed so far
    base = _run(train__loss={2: 2.5, 4: 2.0}, import__consumed_samples={2: 32.0, 4: 64.0})
    base.averaged_over["train/loss"] = 2
    run = _run(
        train__loss={s: v for s, v in enumerate([3.0, 2.0, 2.5, 1.5, 2.0, 2.0, 1.0, 3.0], start=1)},
        train__loss_vs_samples={8 * s: v for s, v in enumerate([3.0, 2.0, 2.5, 1.5, 2.0, 2.0, 1.0, 3.0], start=1)},
    )
    with pytest.raises(UsageError, match="8 samples per step and the baseline 16"):
        compare_runs(run, base, MINDFORMERS)
    fields = compare_runs(run, base, MINDFORMERS, axis="samples").tags["train/loss"].summary
    # the baseline's windows of 32 samples: the run's (3 + 2 + 2.5 + 1.5) / 4 = 2.25, (2 + 2 + 1 + 3) / 4 = 2
    assert fields["steps"] == 2 and fields["first_step"] == 32
    assert fields["first_abs_err"] == pytest.approx(0.25) and fields["max_abs_err"] == pytest.approx(0.25)
    assert fields["mean_abs_err"] == pytest.approx(0.125)


def test_a_nan_loss_fails_and_the_json_stays_json():
    import json

    run = dict(BASE_LOSS) | {3: float("nan")}
    result = compare_runs(_run(train__loss=run), _run(train__loss=BASE_LOSS), MINDFORMERS)
    fields = result.tags["train/loss"].summary
    assert fields["first_divergent_step"] == 3 and fields["max_step"] == 3
    assert fields["mean_abs_err"] is None and fields["max_abs_err"] is None
    assert result.verdict == "fail"
    document = json.loads(json.dumps(as_json(result, "r", "b"), allow_nan=False))
    assert any("non-finite value (the first at step 3)" in note for note in document["notes"])
