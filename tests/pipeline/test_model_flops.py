"""Model FLOPs, TFLOPS per device and MFU (pipeline/model_flops.py, framework/model_flops.py): the
arithmetic, the peak table and option, and the estimate against MindFormers' own formula on real tiny
mcore models (a dense Qwen3, where both count the same work, and a DeepSeek-V3 with MoE and MTP)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BUILD_MCORE_MODELS, printed_json

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


ESTIMATE_BESIDE_FORMULA = (
    BUILD_MCORE_MODELS
    + """
import copy
from mindformers.models.utils import convert_transformer_config_to_args_for_tflops, num_floating_point_operations
from mindformers_tbplugin.framework.mcore import McoreModel
from mindformers_tbplugin.framework.model_flops import estimated_flops
found = {}
for name, net in (("qwen3", qwen3), ("deepseek_v3", deepseek)):
    config = net.get_gpt_transformer_config()
    formula = num_floating_point_operations(convert_transformer_config_to_args_for_tflops(copy.copy(config)), 4)
    mcore = McoreModel(config, net.get_gpt_model(), net)
    found[name] = (formula, estimated_flops(mcore, net, net.trainable_params(), 4, None))
print("FLOPS " + json.dumps(found))
"""
)


@pytest.mark.process
def test_the_estimate_beside_mindformers_formula_on_real_mcore_models(tmp_path: Path) -> None:
    found = printed_json(ESTIMATE_BESIDE_FORMULA, tmp_path, "FLOPS")
    formula, estimate = found["qwen3"]
    assert estimate == pytest.approx(formula, rel=0.02)  # a dense decoder: the same count, norms aside
    formula, estimate = found["deepseek_v3"]
    assert estimate == pytest.approx(formula, rel=0.35)  # MLA, MoE top-k, MTP: an estimate
    print(f"DeepSeek-V3 tiny: estimate / formula = {estimate / formula:.3f}")
