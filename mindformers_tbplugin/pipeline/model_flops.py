"""Model FLOPs per step, achieved TFLOPS per device and MFU. Arithmetic only.

For mcore models the FLOPs per step come from MindFormers' own formula (framework/mcore.py). For
other models :func:`estimate_flops_per_step` gives the same count for a dense decoder: each matrix
parameter costs 6 FLOPs per token (a multiply-add forward, twice that backward), and causal
attention's scores and weighted values ``6 x seq_length x attention width`` per token and layer.
"""

from __future__ import annotations

from typing import Any

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.schema import Kind

# Dense FP16/BF16 peak TFLOPS of one device (one rank), by the SoC name MindSpore reports
# (``mindspore.hal.get_device_name``): the matrix (Cube) units' peak, AI cores x Cube clock x 8,192
# FLOPs per cycle, which is what Huawei's own MFU tools divide by (msprof-analyze's operator MFU,
# torchtitan-npu); the datasheet's headline figure adds the vector units (in brackets). Cores and
# clocks from CANN 8.1.RC1's platform_config/<SoC>.ini; see docs for the sources.
PEAK_TFLOPS = {
    "Ascend910B2": 353.9,  # 24 AI cores at 1.8 GHz (datasheet: 376)
    "Ascend910B3": 294.9,  # 20 at 1.8 GHz (313)
    "Ascend910B4": 245.8,  # 20 at 1.5 GHz (280)
    "Ascend910_9391": 363.7,  # Atlas A3, one die (one device): 24 at 1.85 GHz
    "Ascend910_9362": 245.8,  # Atlas A3 800I, one die: 20 at 1.5 GHz
}
AUTO = "auto"  # this device's entry in PEAK_TFLOPS, when MindSpore names one there


def _is_peak(value: Any) -> bool:
    if isinstance(value, str):
        return value == AUTO or value in PEAK_TFLOPS
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


# The type of the ``peak_tflops`` option.
PEAK = Kind(
    f"a positive number, '{AUTO}' or one of {', '.join(PEAK_TFLOPS)}",
    _is_peak,
    {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"enum": [AUTO, *PEAK_TFLOPS]}]},
)


def estimate_flops_per_step(
    matrix_parameters: float, layers: int, attention_width: int, seq_length: int, samples_per_step: float
) -> float:
    """Forward + backward FLOPs of one step of ``samples_per_step`` sequences of ``seq_length`` tokens.
    ``matrix_parameters``: the elements of every weight matrix a token passes through, but the input
    embedding table (a lookup, no multiply); ``attention_width``: heads x head size."""
    tokens = samples_per_step * seq_length
    return 6.0 * tokens * (matrix_parameters + layers * seq_length * attention_width)


def throughput_tags(
    step_time_s: float, flops_per_step: float, devices: int, peak_tflops: float | None
) -> dict[str, float]:
    """``perf/model_tflops_per_device`` (MindFormers' ``model-flops-throughput-per-npu``: the job's
    FLOPs per step over the step time and the device count) and ``perf/mfu`` when the peak is known."""
    if step_time_s <= 0:
        return {}
    tflops = flops_per_step / step_time_s / 1e12 / max(devices, 1)
    values = {metrics.PERF_MODEL_TFLOPS: tflops}
    if peak_tflops:
        values[metrics.PERF_MFU] = tflops / peak_tflops
    return values


def peak_tflops(option: float | str | None, device_name: Any) -> float | None:
    """The peak the ``peak_tflops`` option stands for; ``device_name()`` is called for ``auto`` only."""
    if option == AUTO:
        option = device_name()
    if isinstance(option, str):
        return PEAK_TFLOPS.get(option)
    return float(option) if option else None
