"""The model's Cell hierarchy as a TensorBoard graph, and a parameter-count table per block.

Each cell becomes a name scope holding one op node (op = the cell's class, attributes: own and total
parameter counts) and one ``Parameter`` node per parameter it owns (shape, dtype, count, trainable),
wired into the cell's node. Built from plain data (:class:`CellInfo`) so the protobuf side never
touches MindSpore and can run on the writer thread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tensorboard.compat.proto import attr_value_pb2, graph_pb2, node_def_pb2, tensor_shape_pb2

_WRAPPER_ATTRS = ("network", "_network", "_backbone")


@dataclass(frozen=True)
class ParamInfo:
    name: str  # short name inside its cell, e.g. "weight"
    shape: tuple[int, ...]
    dtype: str
    trainable: bool

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclass
class CellInfo:
    path: str  # dotted path from the model, "" for the model itself
    type: str
    params: list[ParamInfo] = field(default_factory=list)
    total: int = 0  # parameters of this cell and all cells below it
    trainable: int = 0


def unwrap_model(network: Any) -> Any:
    """The model inside MindSpore/MindFormers train and loss wrappers (``network``, ``_backbone``)."""
    seen = set()
    while network is not None and id(network) not in seen:
        seen.add(id(network))
        inner = next((getattr(network, a) for a in _WRAPPER_ATTRS if _is_cell(getattr(network, a, None))), None)
        if inner is None:
            return network
        network = inner
    return network


def _is_cell(obj: Any) -> bool:
    return hasattr(obj, "cells_and_names") and hasattr(obj, "parameters_and_names")


def describe_cells(model: Any) -> list[CellInfo]:
    """Every cell of ``model`` with its own parameters; totals include the cells below (each
    parameter counted once, even when shared)."""
    cells: list[CellInfo] = []
    owner_of: dict[int, str] = {}
    for path, cell in model.cells_and_names():
        info = CellInfo(path=path, type=type(cell).__name__)
        for full_name, param in cell.parameters_and_names(expand=False):
            if id(param) in owner_of:
                continue
            owner_of[id(param)] = path
            info.params.append(
                ParamInfo(
                    name=full_name.rsplit(".", 1)[-1],
                    shape=tuple(int(d) for d in param.shape),
                    dtype=str(param.dtype),
                    trainable=bool(param.requires_grad),
                )
            )
        cells.append(info)
    by_path = {info.path: info for info in cells}
    for info in cells:
        own = sum(p.count for p in info.params)
        own_trainable = sum(p.count for p in info.params if p.trainable)
        for ancestor in _ancestors(info.path):
            if ancestor in by_path:
                by_path[ancestor].total += own
                by_path[ancestor].trainable += own_trainable
    return cells


def _ancestors(path: str) -> Iterable[str]:
    """``"a.b.c"`` -> ``"a.b.c", "a.b", "a", ""``."""
    parts = path.split(".") if path else []
    for end in range(len(parts), -1, -1):
        yield ".".join(parts[:end])


def _scope(root: str, path: str) -> str:
    return "/".join([root, *path.split(".")]) if path else root


def _attr_s(text: str) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(s=text.encode("utf-8"))


def graph_def(cells: list[CellInfo]) -> graph_pb2.GraphDef:
    """A GraphDef whose name scopes mirror the cell hierarchy (the Graphs dashboard expands them)."""
    root = cells[0].type if cells else "model"
    nodes = []
    for info in cells:
        scope = _scope(root, info.path)
        cell_node = f"{scope}/{info.type}"
        inputs = []
        for param in info.params:
            param_node = f"{scope}/{param.name}"
            shape = tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in param.shape]
            )
            nodes.append(
                node_def_pb2.NodeDef(
                    name=param_node,
                    op="Parameter",
                    attr={
                        "shape": attr_value_pb2.AttrValue(shape=shape),
                        "dtype": _attr_s(param.dtype),
                        "count": attr_value_pb2.AttrValue(i=param.count),
                        "trainable": attr_value_pb2.AttrValue(b=param.trainable),
                    },
                )
            )
            inputs.append(param_node)
        nodes.append(
            node_def_pb2.NodeDef(
                name=cell_node,
                op=info.type,
                input=inputs,
                attr={
                    "own_parameters": attr_value_pb2.AttrValue(i=sum(p.count for p in info.params)),
                    "total_parameters": attr_value_pb2.AttrValue(i=info.total),
                    "trainable_parameters": attr_value_pb2.AttrValue(i=info.trainable),
                },
            )
        )
    return graph_pb2.GraphDef(node=nodes)


def parameter_table(cells: list[CellInfo], depth: int = 2) -> str:
    """Markdown: total and trainable parameters of the model and of its blocks down to ``depth``."""
    rows = ["| block | type | parameters | trainable |", "|---|---|---:|---:|"]
    for info in cells:
        level = len(info.path.split(".")) if info.path else 0
        if level <= depth and (info.total or not info.path):
            name = info.path or "(model)"
            rows.append(f"| `{name}` | {info.type} | {info.total:,} | {info.trainable:,} |")
    return "\n".join(rows)
