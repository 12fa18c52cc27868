"""Host copies of real MindSpore tensors (framework/host_values.py): flat, in the tensor's own numpy type,
through ``get_bytes()`` for the types numpy has and ``asnumpy()`` for the others (bfloat16), copies rather
than views, a reader that returns a Parameter's current values each time it is called, and the readers of
several at once (every router's load joined; each loss part's value as a Python number)."""

from __future__ import annotations

import mindspore as ms  # first: its old-style *_pb2 modules fail once tensorboard's protos are loaded
import numpy as np
import pytest
from mindspore import Parameter, Tensor

from mindformers_tbplugin.framework.host_values import first_values_reader, host_copy, host_reader, joined_reader


@pytest.mark.parametrize(
    ("dtype", "numpy_type"),
    [
        (ms.float16, np.float16),
        (ms.float32, np.float32),
        (ms.float64, np.float64),
        (ms.int8, np.int8),
        (ms.int32, np.int32),
        (ms.int64, np.int64),
        (ms.bool_, np.bool_),
    ],
)
def test_a_tensor_is_copied_flat_in_its_own_type(dtype: ms.dtype, numpy_type: type) -> None:
    values = np.array([[1, 0, 3], [0, 5, 6]])
    copied = host_copy(Tensor(values, dtype))
    assert copied.dtype == numpy_type and copied.shape == (6,)  # flat: the bytes in order
    np.testing.assert_array_equal(copied, values.reshape(-1).astype(numpy_type))


def test_bfloat16_goes_through_asnumpy_and_keeps_its_values() -> None:
    copied = host_copy(Tensor(np.array([[1.5, -2.0], [0.25, 3.0]], np.float32), ms.bfloat16))
    assert str(copied.dtype) == "bfloat16" and copied.shape == (4,)  # numpy has no bfloat16 of its own
    assert copied.astype(np.float32).tolist() == [1.5, -2.0, 0.25, 3.0]  # exact in bfloat16's 8 bits


@pytest.mark.parametrize("dtype", [ms.float32, ms.uint8], ids=["get_bytes", "asnumpy"])
def test_the_copy_keeps_its_values_when_the_parameter_changes(dtype: ms.dtype) -> None:
    # On a CPU asnumpy() is a view of the tensor's memory: a copy taken at step N must not follow step N+1.
    parameter = Parameter(Tensor(np.array([1, 2, 3]), dtype), name="expert_load")
    copied = host_copy(parameter)
    parameter.set_data(Tensor(np.array([7, 8, 9]), dtype))
    assert copied.tolist() == [1, 2, 3]


def test_a_reader_returns_the_current_values_each_time() -> None:
    parameter = Parameter(Tensor(np.zeros((2, 2), np.float32)), name="fi_accu")
    read = host_reader(parameter)
    assert read().tolist() == [0.0] * 4
    parameter.set_data(Tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)))
    assert read().tolist() == [1.0, 2.0, 3.0, 4.0]


def _loads(dtype: ms.dtype = ms.float32) -> list[Parameter]:
    return [Parameter(Tensor(np.full(4, index, np.float32), dtype), name=f"load{index}") for index in range(3)]


@pytest.mark.parametrize("mixed", [False, True], ids=["one type: joined bytes", "mixed types: one by one"])
def test_a_joined_reader_returns_every_tensor_in_order_and_follows_them(mixed: bool) -> None:
    loads = _loads()
    if mixed:
        loads[1] = Parameter(Tensor(np.full(4, 1, np.float32), ms.bfloat16), name="load1")
    read = joined_reader(loads)
    first = read()
    assert first.astype(np.float32).tolist() == [0.0] * 4 + [1.0] * 4 + [2.0] * 4
    loads[2].set_data(Tensor(np.full(4, 7, np.float32), loads[2].dtype))
    assert read().astype(np.float32).tolist()[8:] == [7.0] * 4  # the values now
    assert first.astype(np.float32).tolist()[8:] == [2.0] * 4  # an earlier read is a copy


@pytest.mark.parametrize(
    ("dtype", "shape"),
    [(ms.float32, (1,)), (ms.float16, (1,)), (ms.bfloat16, (1,)), (ms.float32, (2,))],
    ids=["float32: struct", "float16: struct", "bfloat16: asnumpy", "two elements: the first"],
)
def test_first_values_are_python_numbers_of_each_tensor_now(dtype: ms.dtype, shape: tuple[int, ...]) -> None:
    parts = [Parameter(Tensor(np.full(shape, 0.5 + index, np.float32), dtype), name=f"p{index}") for index in range(3)]
    read = first_values_reader(parts)
    assert read() == (0.5, 1.5, 2.5) and all(type(value) is float for value in read())
    parts[0].set_data(Tensor(np.full(shape, 4.0, np.float32), dtype))
    assert read()[0] == 4.0
