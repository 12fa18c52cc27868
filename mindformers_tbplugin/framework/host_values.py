"""Host copies of MindSpore tensors, at the cost a training step can afford.

``Tensor.get_bytes()`` (public, CPU / GPU / Ascend) copies a tensor's data to the host after
synchronising it from the device, in about 0.5 µs for a small tensor; ``asnumpy()`` costs 4-6 µs
because numpy parses the tensor's buffer format in Python, and on a CPU it returns a view of the
tensor's memory rather than a copy. Tensors of a type numpy lacks (bfloat16) go through
``asnumpy()``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
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


def joined_reader(tensors: Sequence[Any]) -> Callable[[], np.ndarray]:
    """A function returning the flat host copies of ``tensors``, one after the other, in one array (the
    loss parts, or every router's load: read together at each logged step). When they share a numpy
    type their bytes are joined and parsed once, which saves the per-tensor ``np.frombuffer`` that
    dominates a read of many small tensors; otherwise each is read on its own and concatenated."""
    getters = [getattr(tensor, "get_bytes", None) for tensor in tensors]
    types = {_NUMPY_TYPES.get(str(getattr(tensor, "dtype", ""))) for tensor in tensors}
    if len(types) == 1 and None not in types and None not in getters:
        dtype = types.pop()
        return lambda: np.frombuffer(b"".join([get() for get in getters]), dtype=dtype)
    readers = [host_reader(tensor) for tensor in tensors]
    return lambda: np.concatenate([read() for read in readers])


def first_values_reader(tensors: Sequence[Any]) -> Callable[[], tuple[float, ...]]:
    """A function returning the first value of each of ``tensors`` as Python numbers (the loss parts,
    one-element accumulators read at every logged step). One-element tensors of one numpy type are
    read as joined bytes unpacked by ``struct``: no numpy call, each of which costs microseconds in a
    training step's cold caches."""
    getters = [getattr(tensor, "get_bytes", None) for tensor in tensors]
    types = {_NUMPY_TYPES.get(str(getattr(tensor, "dtype", ""))) for tensor in tensors}
    one_element = all(int(np.prod(getattr(tensor, "shape", ()) or (1,))) == 1 for tensor in tensors)
    if one_element and len(types) == 1 and None not in types and None not in getters:
        unpack = struct.Struct(f"={len(tensors)}{types.pop().char}").unpack
        return lambda: unpack(b"".join([get() for get in getters]))
    readers = [host_reader(tensor) for tensor in tensors]
    return lambda: tuple(float(read()[0]) for read in readers)


# MindSpore dtype objects already looked up: building str(dtype) costs microseconds at a cold step end.
_TYPES_SEEN: dict[Any, np.dtype | None] = {}


def host_copy(tensor: Any) -> np.ndarray:
    """A flat host copy of ``tensor`` (a MindSpore tensor, or anything with ``asnumpy()``): a new tensor
    every step (the wrapper's per-parameter gradient norms), its type looked up once per dtype."""
    get_bytes = getattr(tensor, "get_bytes", None)
    if get_bytes is not None:
        ms_type = tensor.dtype
        dtype = _TYPES_SEEN.get(ms_type, False)
        if dtype is False:
            dtype = _TYPES_SEEN[ms_type] = _NUMPY_TYPES.get(str(ms_type))
        if dtype is not None:
            return np.frombuffer(get_bytes(), dtype=dtype)
    return np.array(tensor.asnumpy()).reshape(-1)


def bytes_type(tensor: Any) -> np.dtype | None:
    """The numpy type of ``tensor.get_bytes()``'s data, or None where its bytes are not numpy's (no
    ``get_bytes``, bfloat16): for a tensor whose type stays the same at every step, looked up once."""
    if getattr(tensor, "get_bytes", None) is None:
        return None
    return _NUMPY_TYPES.get(str(getattr(tensor, "dtype", "")))


def float32_copy(param: Any, copy: bool = True) -> np.ndarray:
    """A float32 host copy in the parameter's shape, never a view of its memory (which the next step
    changes in place on a CPU); ``copy=False``: a view where the parameter's memory is host memory
    already, for reading it now."""
    if str(getattr(param, "dtype", "")) == "BFloat16":  # numpy has no bfloat16
        from mindspore import dtype as mstype

        param = param.astype(mstype.float32)
    values = param.asnumpy()
    return np.array(values, dtype=np.float32, copy=True) if copy else np.asarray(values, dtype=np.float32)


def sharded(tensor: Any) -> bool:
    """Whether ``tensor`` is a distributed tensor split across ranks (hyper-parallel's DTensor with a
    ``Shard`` placement, as FSDP leaves parameters and optimizer states): a host copy holds only this
    rank's part of it."""
    placements = getattr(tensor, "placements", None)
    return bool(placements) and any(type(placement).__name__ == "Shard" for placement in placements)
