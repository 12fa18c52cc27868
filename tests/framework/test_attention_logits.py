"""Reading an mcore model's tracked max attention logits (framework/attention_logits.py): which layers,
the per-layer and overall maxima, and who zeroes the running max. Against a real tiny DeepSeek-V3:
tests/jobs/test_mcore_models.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from mindformers_tbplugin.framework.attention_logits import AttentionLogits


@dataclass
class HeadMaxima:
    name: str
    value: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    def asnumpy(self) -> np.ndarray:
        return self.value


@dataclass
class Model:
    """The cells an mcore GPTModel has: core attentions with ``max_logits_val``, and others."""

    layers: list[HeadMaxima]
    resets: list[int] = field(default_factory=list)

    def cells_and_names(self):
        yield "decoder", SimpleNamespace()
        for maxima in self.layers:
            yield maxima.name.rsplit(".", 1)[0], SimpleNamespace(max_logits_val=maxima)

    def reset_max_attention_logit(self) -> None:
        self.resets.append(1)
        for maxima in self.layers:
            maxima.value[:] = 0


def _model() -> Model:
    names = ["decoder.layers.0", "decoder.layers.1", "mtp.layers.0.transformer_layer"]
    values = [[1.0, 3.0], [7.5, 2.0], [0.5, 4.0]]
    return Model(
        [
            HeadMaxima(f"model.{name}.self_attention.core_attention.max_logits_val", np.array(v, np.float32))
            for name, v in zip(names, values, strict=True)
        ]
    )


def test_maxima_per_layer_and_over_all_layers() -> None:
    logits = AttentionLogits.of_model(SimpleNamespace(track_max_attention_logit=True), _model(), False)
    assert logits.tags(10) == {
        "attention_logit_max/layers.0": 3.0,
        "attention_logit_max/layers.1": 7.5,
        "attention_logit_max/mtp.layers.0": 4.0,
        "attention_logit_max/all": 7.5,
    }
    assert logits.describe() == "max attention logit of 3 layers x 2 heads (the monitor zeroes it at each read step)"


def test_the_monitor_zeroes_the_running_max_only_when_mindformers_does_not() -> None:
    config = SimpleNamespace(track_max_attention_logit=True)
    alone = _model()
    AttentionLogits.for_training(SimpleNamespace(trainer="classic", eval_callbacks=[]), config, alone).step_began()
    assert alone.resets == [1] and not alone.layers[1].value.any()

    MaxLogitsMonitor = type("MaxLogitsMonitor", (), {})  # MindFormers' callback, added with Muon
    classic = SimpleNamespace(trainer="classic", eval_callbacks=[MaxLogitsMonitor()])
    with_callback = _model()
    AttentionLogits.for_training(classic, config, with_callback).step_began()
    assert with_callback.resets == [] and with_callback.layers[1].value[0] == 7.5
    # the PyNative trainer tracks them only with a MaxLogitsMonitor, which it adds when the YAML has none
    pynative = _model()
    AttentionLogits.for_training(SimpleNamespace(trainer="pynative"), config, pynative).step_began()
    assert pynative.resets == []


def test_values_captured_ahead_of_a_reset_are_the_steps_own() -> None:
    """MaxLogitsMonitor listed before the monitor zeroes the values before its step end: the capture in
    front of that reset is what the step writes; a capture of another step is not used."""
    model = _model()
    logits = AttentionLogits.of_model(SimpleNamespace(track_max_attention_logit=True), model, True)
    logits.capture(20)
    model.reset_max_attention_logit()
    assert logits.tags(20)["attention_logit_max/all"] == 7.5
    logits.capture(30)
    assert logits.tags(40)["attention_logit_max/all"] == 0.0  # read now: zeroed


def test_a_model_that_does_not_track_gives_nothing() -> None:
    assert AttentionLogits.of_model(SimpleNamespace(track_max_attention_logit=False), _model(), False) is None
    assert AttentionLogits.of_model(SimpleNamespace(), _model(), False) is None
    assert AttentionLogits.of_model(SimpleNamespace(track_max_attention_logit=True), Model([]), False) is None
