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
