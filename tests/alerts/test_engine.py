"""The alert rule engine on synthetic series: each rule fires where it should and nowhere else."""

from __future__ import annotations

import math
import random

import pytest

from mindformers_tbplugin.alerts.engine import DEFAULT_RULES, AlertEngine, describe_rules, parse_rules
from mindformers_tbplugin.schema import ConfigError

LOSS, GRAD, TOKENS, SCALE, OVERFLOW = (
    "train/loss",
    "train/grad_norm",
    "perf/tokens_per_s",
    "train/loss_scale",
    ("train/overflow"),
)


def healthy_run(seed: int, steps: int = 3000, warmup: int = 200) -> list[dict[str, float]]:
    """An ordinary training: power-law loss with noise, grad norm rising through lr warm-up then
    decaying, noisy throughput with a slow first (compiling) step, dynamic loss scaling with rare
    isolated overflows."""
    rng = random.Random(seed)
    series = []
    scale = 65536.0
    for step in range(1, steps + 1):
        warm = min(step / warmup, 1.0)
        loss = 2.0 + 8.0 / math.sqrt(1.0 + step / 50.0) + rng.gauss(0, 0.03)
        grad = (0.6 + 2.4 * warm) * (0.5 + 0.5 * math.exp(-max(step - warmup, 0) / 800)) * (1 + rng.gauss(0, 0.08))
        tokens = 12000.0 * (1 + rng.gauss(0, 0.05)) if step > 1 else 150.0
        overflow = 1.0 if rng.random() < 0.002 else 0.0
        scale = scale / 2 if overflow else min(scale * (2.0 if step % 1000 == 0 else 1.0), 65536.0)
        series.append({LOSS: loss, GRAD: grad, TOKENS: tokens, SCALE: scale, OVERFLOW: overflow, "train/lr": warm})
    return series


def run_engine(rules: list[dict], series: list[dict[str, float]]) -> list:
    engine = AlertEngine(parse_rules(rules))
    fired = []
    for step, values in enumerate(series, start=1):
        fired += engine.observe(step, values)
    return fired


ALL_RULES = [
    *DEFAULT_RULES,
    {"rule": "plateau"},
    {"rule": "threshold", "tag": GRAD, "above": 50.0},
    {"rule": "throughput_drop", "tag": TOKENS},
]


@pytest.mark.parametrize("seed", [20261129, 7])
def test_healthy_noisy_series_with_warmup_raises_nothing(seed: int) -> None:
    assert run_engine(ALL_RULES, healthy_run(seed)) == []


def test_nonfinite_fires_on_nan_and_inf_with_cooldown() -> None:
    series = healthy_run(1, steps=300)
    for step in (50, 51, 52, 200):
        series[step - 1][LOSS] = math.nan
    series[120 - 1][GRAD] = math.inf
    fired = run_engine([{"rule": "nonfinite", "cooldown": 10}], series)
    assert [(a.tag, a.step) for a in fired] == [(LOSS, 50), (GRAD, 120), (LOSS, 200)]
    assert fired[0].severity == "critical" and "nan" in fired[0].message


def test_spike_fires_at_the_spike_only() -> None:
    series = healthy_run(2, steps=600)
    series[400 - 1][LOSS] *= 3
    series[450 - 1][GRAD] *= 4
    fired = run_engine([{"rule": "spike", "k": 6}], series)
    assert [(a.tag, a.step) for a in fired] == [(LOSS, 400), (GRAD, 450)]
    assert fired[0].baseline == pytest.approx(series[398][LOSS], rel=0.05)


def test_plateau_fires_after_patience_steps_without_improvement() -> None:
    rng = random.Random(4)
    series = [{LOSS: max(5.0 - 0.01 * step, 3.0) + rng.gauss(0, 0.01)} for step in range(1, 601)]
    fired = run_engine([{"rule": "plateau", "patience": 100, "min_delta": 0.05}], series)
    assert fired, "a flat loss must be reported"
    assert 200 + 100 <= fired[0].step <= 200 + 100 + 10
    assert fired[0].baseline <= 3.05


def test_threshold_needs_for_steps_consecutive_points() -> None:
    series = [{GRAD: 1.0} for _ in range(100)]
    series[20 - 1][GRAD] = 20.0  # one point: not enough
    for step in (60, 61, 62):
        series[step - 1][GRAD] = 20.0
    fired = run_engine([{"rule": "threshold", "tag": GRAD, "above": 10, "for_steps": 2}], series)
    assert [a.step for a in fired] == [61]
    below = run_engine([{"rule": "threshold", "tag": GRAD, "below": 0.5}], [{GRAD: 1.0}, {GRAD: 0.1}])
    assert [(a.step, a.baseline) for a in below] == [(2, 0.5)]


def test_throughput_drop_needs_a_sustained_drop() -> None:
    series = healthy_run(5, steps=500)
    series[200 - 1][TOKENS] *= 0.4  # a single dip
    for step in range(400, 500):
        series[step - 1][TOKENS] *= 0.5
    fired = run_engine([{"rule": "throughput_drop", "ratio": 0.3, "for_steps": 3}], series)
    assert [a.step for a in fired] == [402]
    assert fired[0].baseline == pytest.approx(12000, rel=0.05)


def test_stall_fires_only_after_k_median_intervals_and_min_silence() -> None:
    (rule,) = parse_rules([{"rule": "stall", "k": 10, "min_silence": 60}], watcher=True)
    engine = AlertEngine([rule], run="r")
    for step in range(1, 101):
        engine.progress(step, 1000.0 + 2.0 * step)  # one step every 2 s; the last at t=1200
    assert engine.check_stall(1200 + 59) == []  # below min_silence
    (alert,) = engine.check_stall(1200 + 61)
    assert (alert.rule, alert.run, alert.step, alert.baseline) == ("stall", "r", 100, 2.0)
    assert engine.check_stall(1200 + 100) == []  # reported once per stall
    engine.progress(101, 1400.0)
    assert engine.check_stall(1400 + 30) == []
    (old,) = parse_rules([{"rule": "stall", "give_up_after": 3600}], watcher=True)
    finished = AlertEngine([old])
    for step in range(1, 10):
        finished.progress(step, float(step))
    assert finished.check_stall(10 + 7200) == []  # silent longer than give_up_after: finished, not stalled


def test_config_errors_are_listed_together() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules(
            [
                {"rule": "spkie"},
                {"rule": "spike", "kk": 3},
                {"rule": "spike", "k": "six"},
                {"rule": "threshold", "tag": GRAD},
                {"rule": "stall"},
                "nonfinite",
                {"tag": LOSS},
            ],
            owner="AlertMonitor",
        )
    text = str(caught.value)
    assert "rules[0].rule: unknown rule 'spkie'; did you mean 'spike'?" in text
    assert "rules[1].kk: unknown parameter of spike; did you mean 'k'?" in text
    assert "rules[2].k: expected number, got 'six' (string)" in text
    assert "rules[3].above: give 'above', 'below' or both" in text
    assert "rules[4].rule: 'stall' is evaluated by 'mftb watch' only" in text
    assert "rules[5]: expected a mapping" in text
    assert "rules[6].rule: missing" in text
    assert len(caught.value.problems) == 7


def test_every_rule_is_documented() -> None:
    text = describe_rules()
    for name in ("nonfinite", "spike", "plateau", "threshold", "throughput_drop", "loss_scale_collapse", "stall"):
        assert f"{name}: " in text
    assert "ratio = 0.3" in text and "k = 8.0" in text
