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
