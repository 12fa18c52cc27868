"""Write a small synthetic MindRecord dataset of ``input_ids`` for tiny training runs.

The sequences are learnable (arithmetic progressions modulo the vocabulary, with a little noise),
so a tiny model's loss visibly falls within a few dozen steps, which makes demo curves meaningful.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def synthetic_sequences(num_samples: int, seq_length: int, vocab_size: int, seed: int = 0) -> np.ndarray:
    """``num_samples`` x ``seq_length + 1`` int32 token ids (the extra token is the last label)."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, vocab_size, size=(num_samples, 1))
    strides = rng.integers(1, 4, size=(num_samples, 1))
    positions = np.arange(seq_length + 1)[None, :]
    tokens = (starts + strides * positions) % vocab_size
    noise = rng.random(tokens.shape) < 0.05
    tokens[noise] = rng.integers(0, vocab_size, size=int(noise.sum()))
    return tokens.astype(np.int32)


def write_mindrecord(
    path: str | os.PathLike,
    num_samples: int = 512,
    seq_length: int = 32,
    vocab_size: int = 256,
    seed: int = 0,
    labels: bool = False,
) -> Path:
    """Write the dataset to ``path`` (replacing an existing one) and return its absolute path.

    ``labels``: the columns MindFormers' mcore models (``use_legacy: False``) train on, which do not
    shift ``input_ids`` themselves: ``input_ids`` and ``labels`` of ``seq_length`` tokens, one apart,
    and a float32 ``loss_mask`` of ones; else ``input_ids`` of ``seq_length + 1`` (legacy models)."""
    from mindspore.mindrecord import FileWriter

    target = Path(path).expanduser().resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in (target, target.with_name(target.name + ".db")):
        stale.unlink(missing_ok=True)
    writer = FileWriter(str(target), shard_num=1, overwrite=True)
    rows = synthetic_sequences(num_samples, seq_length, vocab_size, seed)
    if labels:
        columns = {"input_ids": "int32", "labels": "int32", "loss_mask": "float32"}
        writer.add_schema({name: {"type": kind, "shape": [-1]} for name, kind in columns.items()}, "synthetic_labels")
        mask = np.ones(seq_length, dtype=np.float32)
        writer.write_raw_data([{"input_ids": row[:-1], "labels": row[1:], "loss_mask": mask} for row in rows])
    else:
        writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "synthetic_input_ids")
        writer.write_raw_data([{"input_ids": row} for row in rows])
    writer.commit()
    return target
