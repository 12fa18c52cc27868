"""Host copies of MindSpore tensors, at the cost a training step can afford.

``Tensor.get_bytes()`` (public, CPU / GPU / Ascend) copies a tensor's data to the host after
synchronising it from the device, in about 0.5 µs for a small tensor; ``asnumpy()`` costs 4-6 µs
because numpy parses the tensor's buffer format in Python, and on a CPU it returns a view of the
tensor's memory rather than a copy. Tensors of a type numpy lacks (bfloat16) go through
``asnumpy()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# MindSpore's dtype names (str(tensor.dtype)) of the types numpy has: the data's bytes as they are.
_NUMPY_TYPES = {
    name.capitalize(): np.dtype(name) for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64")
}
_NUMPY_TYPES["Bool"] = np.dtype(bool)


def host_reader(tensor: Any) -> Callable[[], np.ndarray]:
    """A function returning a flat host copy of ``tensor``'s current values (for a Parameter read again
    and again: its type is looked up once)."""
    get_bytes = getattr(tensor, "get_bytes", None)
    dtype = _NUMPY_TYPES.get(str(getattr(tensor, "dtype", "")))
    if get_bytes is not None and dtype is not None:
        return lambda: np.frombuffer(get_bytes(), dtype=dtype)
    return lambda: np.array(tensor.asnumpy()).reshape(-1)


def host_copy(tensor: Any) -> np.ndarray:
    """A flat host copy of ``tensor`` (a MindSpore tensor, or anything with ``asnumpy()``)."""
    return host_reader(tensor)()
