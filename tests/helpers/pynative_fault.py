"""A test-only PyNative-trainer callback that raises at a given step, as a failing training would."""

from mindformers.pynative.callback import TrainerCallback
from mindformers.tools.register import MindFormerModuleType, MindFormerRegister


class RaiseAtStep(TrainerCallback):
    def __init__(self, step: int = 3) -> None:
        self.step = step

    def on_step_end(self, args, state, **kwargs):
        if state.global_step == self.step:
            raise RuntimeError(f"test failure at step {self.step}")


MindFormerRegister.register_cls(RaiseAtStep, module_type=MindFormerModuleType.CALLBACK)
