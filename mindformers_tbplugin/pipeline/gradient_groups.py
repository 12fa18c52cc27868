"""Per-layer norms: which group each parameter belongs to, and group norms from per-parameter
squared norms. numpy only, no I/O, no MindSpore.

MindFormers' train wrappers return, with ``runner_wrapper.local_norm: True``, one squared L2 norm
per gradient (in the optimizer's parameter order). A group's norm is the square root of the sum of
its parameters' squared norms, so group norms compose: the sum of squares of all group norms is the
sum of all squared parameter norms.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mindformers_tbplugin.schema import NON_EMPTY_TEXT, Kind

GROUPINGS = ("layer", "param")
OTHER_GROUP = "other"


def _is_grouping(value: object) -> bool:
    if isinstance(value, str):
        return value in GROUPINGS
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)


# The type of the ``norm_groups`` option.
NORM_GROUPS = Kind(
    "'layer', 'param' or a non-empty list of name patterns",
    _is_grouping,
    {"anyOf": [{"enum": list(GROUPINGS)}, {"type": "array", "minItems": 1, "items": NON_EMPTY_TEXT.json_schema}]},
)

# ``model.layers.3.attention.wq.weight`` (legacy), ``decoder.layers.3.self_attention...`` (mcore):
# the word before ``layers`` says whose layers they are; the main stack's are plain ``layers.N``.
_LAYER = re.compile(r"(?:^|\.)(?:(?P<owner>[A-Za-z_][\w]*)\.)?layers\.(?P<index>\d+)\.")
_MAIN_STACKS = frozenset({None, "model", "decoder", "transformer", "backbone", "language_model"})
# Non-layer parts, by the first matching word of the name (legacy LLaMA/Qwen, mcore GPT models).
_PARTS = (
    ("embedding", re.compile(r"embed|wte\b|word_embeddings")),
    ("final_norm", re.compile(r"norm_out|final_layernorm|final_norm|(?:^|\.)model\.norm\.|ln_f\b")),
    ("head", re.compile(r"lm_head|output_layer|(?:^|\.)head\.")),
)


def layer_group(name: str) -> str:
    """The ``layer`` grouping: ``layers.N``, ``embedding``, ``final_norm``, ``head``, ``<owner>.layers.N``
    for a second stack (e.g. ``mtp.layers.0``), else ``other``."""
    match = _LAYER.search(name)
    if match:
        owner = match.group("owner")
        index = match.group("index")
        return f"layers.{index}" if owner in _MAIN_STACKS else f"{owner}.layers.{index}"
    for group, pattern in _PARTS:
        if pattern.search(name):
            return group
    return OTHER_GROUP


def pattern_group(name: str, patterns: Sequence[str]) -> str:
    """The first fnmatch pattern ``name`` matches (the group is named after it), else ``other``."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(name, pattern):
            return pattern
    return OTHER_GROUP


def _layer_sort_key(group: str) -> tuple:
    """Embedding first, then the layers in numeric order, then the rest (TensorBoard also sorts by name)."""
    match = re.search(r"layers\.(\d+)$", group)
    order = {"embedding": 0, "final_norm": 3, "head": 4, OTHER_GROUP: 5}
    if match:
        return (1 if group.startswith("layers.") else 2, group[: match.start()], int(match.group(1)))
    return (order.get(group, 5), group, 0)


@dataclass(frozen=True)
class GroupLayout:
    """Parameter ``names`` (in the order their squared norms arrive) and each one's group index."""

    names: tuple[str, ...]
    groups: tuple[str, ...]
    index: np.ndarray  # int64, one group index per name
    _tag_names: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, names: Sequence[str], grouping: str | Sequence[str]) -> GroupLayout:
        if grouping == "param":
            labels = list(names)
        elif grouping == "layer":
            labels = [layer_group(name) for name in names]
        else:
            labels = [pattern_group(name, grouping) for name in names]
        unique = dict.fromkeys(labels)
        groups = tuple(unique) if grouping == "param" else tuple(sorted(unique, key=_layer_sort_key))
        position = {group: i for i, group in enumerate(groups)}
        index = np.fromiter((position[label] for label in labels), dtype=np.int64, count=len(labels))
        return cls(tuple(names), groups, index)

    def __len__(self) -> int:
        return len(self.groups)

    def group_squares(self, squares: np.ndarray) -> np.ndarray:
        """Per-group sums of per-parameter squared norms (float64): one ``bincount``."""
        return np.bincount(self.index, weights=squares, minlength=len(self.groups))

    def tags(self, prefix: str, group_squares: np.ndarray, total_tag: str | None = None) -> dict[str, float]:
        """``{prefix + group: norm}``, and the norm over all groups under ``total_tag``."""
        names = self._tag_names.get(prefix)
        if names is None:  # built once per prefix: this runs at every logged step
            names = self._tag_names[prefix] = tuple(prefix + group for group in self.groups)
        norms = np.sqrt(group_squares).tolist()
        values = dict(zip(names, norms, strict=True))
        if total_tag is not None:
            values[total_tag] = math.hypot(*norms)  # the square root of the squares' sum, in one call
        return values


def log10_norms(squares: np.ndarray) -> np.ndarray:
    """log10 of per-parameter norms from their squares; zero norms (no gradient) become -inf and
    are left out of histograms like other non-finite values."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 0.5 * np.log10(squares.astype(np.float64, copy=False))
