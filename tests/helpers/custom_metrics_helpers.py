"""extra_metrics functions used by the tests (imported by the training subprocess)."""

from mindformers_tbplugin import metric


def step_parity(cb_params):
    """A model-kind metric (the default kind)."""
    return {"custom/step_parity": cb_params.cur_step_num % 2}


@metric(kind="data")
def batch_tokens(cb_params):
    """A data-kind metric computed from the step's inputs."""
    input_ids = cb_params.train_dataset_element[0]
    return {"custom/batch_tokens": float(input_ids.shape[0] * (input_ids.shape[1] - 1))}


def mindformers_adam_norms(cb_params):
    """MindFormers' TrainingStateMonitor's own per-parameter Adam moment norms (its ``_get_optimizer_state``,
    what ``optimizer_state_format`` writes), combined over all parameters and over layer 1's, every 8 steps.
    A release without that function: the same per-parameter MindSpore norms, computed here."""
    import math

    try:
        from mindformers.core.callback.callback import _get_optimizer_state
    except ImportError:
        import mindspore as ms

        def _get_optimizer_state(moments):
            return {moment.name: float(moment.astype(ms.float32).norm().asnumpy()) for moment in moments}

    if cb_params.cur_step_num % 8:
        return {}
    optimizer = cb_params.optimizer or cb_params.network.optimizer
    pairs = (("moment1", "moment2"), ("moments1", "moments2"), ("exp_avg", "exp_avg_sq"))  # TSM's order
    first, second = next((a, b) for a, b in pairs if hasattr(optimizer, a) and hasattr(optimizer, b))
    values = {}
    for name, moments in (("m", getattr(optimizer, first)), ("v", getattr(optimizer, second))):
        norms = _get_optimizer_state(moments)
        values[f"custom/tsm_adam_{name}_total"] = math.sqrt(sum(norm**2 for norm in norms.values()))
        layer = [norm for key, norm in norms.items() if ".layers.1." in key]
        values[f"custom/tsm_adam_{name}_layers.1"] = math.sqrt(sum(norm**2 for norm in layer))
    return values


_BEFORE_STEP: dict[str, object] = {}


def reference_update_norms(cb_params):
    """The parameter change over every 8th step recomputed from the network's own parameters: copied at
    the end of the step before, compared at the step's end (over the parameters the optimizer updates, and
    over layer 1's)."""
    import math

    import numpy as np

    step = cb_params.cur_step_num
    params = (cb_params.optimizer or cb_params.network.optimizer).parameters
    if step % 8 == 7:
        _BEFORE_STEP.clear()
        _BEFORE_STEP.update({p.name: np.array(p.asnumpy(), dtype=np.float64, copy=True) for p in params})
        return {}
    if step % 8 or not _BEFORE_STEP:
        return {}
    changes = {p.name: float(np.sum((p.asnumpy().astype(np.float64) - _BEFORE_STEP[p.name]) ** 2)) for p in params}
    layer = [value for name, value in changes.items() if ".layers.1." in name]
    layer_weight = sum(float(np.sum(old**2)) for name, old in _BEFORE_STEP.items() if ".layers.1." in name)
    return {
        "custom/ref_update_total": math.sqrt(sum(changes.values())),
        "custom/ref_update_layers.1": math.sqrt(sum(layer)),
        "custom/ref_update_ratio_layers.1": math.sqrt(sum(layer) / layer_weight),
    }


def mindformers_attention_logit_max(cb_params):
    """MindFormers' own max attention logits (``get_max_attention_logit``, what TrainingStateMonitor's
    ``max_attention_logit_format`` writes as ``max_attention_logit/max``), over every layer and head, and
    over layer 1's heads, every 4 steps."""
    import numpy as np
    from mindformers.wrapper.wrapper import get_real_models

    if cb_params.cur_step_num % 4:
        return {}
    logits = get_real_models(cb_params.train_network).get_max_attention_logit()
    layer = [value.asnumpy() for name, value in logits.items() if ".layers.1." in name and "mtp" not in name]
    return {
        "custom/mf_attention_logit_max": float(max(np.max(value.asnumpy()) for value in logits.values())),
        "custom/mf_attention_logit_max_layers.1": float(np.max(layer)),
    }


STABLE_RANK_REFERENCE = ("model.layers.1.attention.wq.weight", "model.layers.0.feed_forward.w2.weight")


def mindformers_stable_rank(cb_params):
    """MindFormers' own stable rank and largest eigenvalue (``_get_stable_rank``, which
    TrainingStateMonitor's ``stable_rank_config`` calls) of two weights every 8 steps, with 500 power
    iterations instead of its default 5: converged, where 5 from a random vector are not. MindFormers 1.7
    has no stable rank: there, numpy's singular values of the same weights."""
    import numpy as np

    try:
        from mindformers.core.callback.callback import _get_stable_rank
    except ImportError:

        def _get_stable_rank(param, _):
            singular = np.linalg.svd(param.asnumpy().astype(np.float64), compute_uv=False)
            return np.sum(singular**2) / singular[0] ** 2, singular[0] ** 2

    if cb_params.cur_step_num % 8:
        return {}
    values = {}
    for param in cb_params.train_network.trainable_params():
        name = param.name.removeprefix("network.")
        if name in STABLE_RANK_REFERENCE:
            stable_rank, eigenvalue = _get_stable_rank(param, 500)
            values[f"custom/mf_stable_rank/{name}"] = float(stable_rank)
            values[f"custom/mf_eigenvalue/{name}"] = float(eigenvalue)
    return values
