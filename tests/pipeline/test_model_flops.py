"""Model FLOPs, TFLOPS per device and MFU (pipeline/model_flops.py): the estimate's arithmetic, TFLOPS per
device and MFU, the peak table and option. The estimate beside MindFormers' own formula on real models is
in tests/framework/test_model_flops.py."""

from __future__ import annotations

import pytest

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.model_flops import (
    PEAK_TFLOPS,
    estimate_flops_per_step,
    peak_tflops,
    throughput_tags,
)


def test_the_estimate_counts_six_flops_per_matrix_element_and_token_and_causal_attention() -> None:
    # 2 layers, width 64, 32 tokens, 4 samples: 128 tokens x 6 x (10,000 + 2 x 32 x 64)
    assert estimate_flops_per_step(10_000, 2, 64, 32, 4) == 6 * 128 * (10_000 + 2 * 32 * 64)


def test_tflops_per_device_and_mfu() -> None:
    values = throughput_tags(step_time_s=2.0, flops_per_step=8e15, devices=8, peak_tflops=250.0)
    assert values[metrics.PERF_MODEL_TFLOPS] == pytest.approx(500.0)  # 8 PFLOPs in 2 s on 8 devices
    assert values[metrics.PERF_MFU] == pytest.approx(8e15 / 2.0 / 1e12 / 8 / 250.0)
    assert metrics.PERF_MFU not in throughput_tags(2.0, 8e15, 8, None)
    assert throughput_tags(0.0, 8e15, 8, 250.0) == {}


def test_the_peak_option_takes_a_number_a_part_or_this_devices_part() -> None:
    asked: list[int] = []

    def device_name() -> str | None:
        asked.append(1)
        return "Ascend910B3"

    assert peak_tflops(280.0, device_name) == 280.0 and not asked
    assert peak_tflops("Ascend910B2", device_name) == PEAK_TFLOPS["Ascend910B2"] and not asked
    # on an NPU MindSpore names the part (mindspore.hal.get_device_name); no NPU here, so named by hand
    assert peak_tflops("auto", device_name) == PEAK_TFLOPS["Ascend910B3"] and asked
    assert peak_tflops("auto", lambda: None) is None  # a CPU, or a part not in the table: no MFU
    assert peak_tflops("auto", lambda: "Ascend950PR_9599") is None
    assert peak_tflops(None, device_name) is None
