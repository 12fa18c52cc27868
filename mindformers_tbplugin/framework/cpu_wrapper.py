"""A runner wrapper that runs on CPU (the stand-in for NPUs on machines without one).

MindFormers' ``MFTrainOneStepCell`` takes the Ascend-910A overflow path (``NPUClearFloatStatusV2`` /
``NPUGetFloatStatusV2``) on every target that is not GPU or 910B, and those ops do not exist on CPU.
This subclass checks overflow the portable way (are all gradients finite?), which is what the GPU
path does. Select it in YAML::

    runner_wrapper:
      type: CPUTrainOneStepCell
      scale_sense: 1.0
      use_clip_grad: True

registration/ registers it (``MindFormerModuleType.WRAPPER``) with the callbacks.
"""

from __future__ import annotations

from typing import Any

from mindformers_tbplugin.framework.mindformers_api import resolve

_is_not_finite = resolve("finite_check_overflow")


class CPUTrainOneStepCell(resolve("MFTrainOneStepCell")):  # type: ignore[misc]
    """``MFTrainOneStepCell`` with a finite-check overflow test that every backend supports."""

    def get_overflow_status(self, status: Any, compute_output: Any) -> Any:
        return self._get_distributed_overflow_status_on_infnan_mode(_is_not_finite, compute_output)
