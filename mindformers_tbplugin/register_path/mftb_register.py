"""Module for MindFormers' own registration route (REGISTER_PATH + ``auto_register``).

MindFormers copies this file into its module cache and reads the named class from it::

    callbacks:
      - type: TensorBoardMonitor
        auto_register: mftb_register.TensorBoardMonitor

with ``REGISTER_PATH=$(mftb register-path)`` (or ``run_mindformer.py --register_path ...``).
"""

from mindformers_tbplugin.callbacks import AlertMonitor, HistogramMonitor, TensorBoardMonitor
from mindformers_tbplugin.framework.cpu_wrapper import CPUTrainOneStepCell

__all__ = ["AlertMonitor", "CPUTrainOneStepCell", "HistogramMonitor", "TensorBoardMonitor"]
