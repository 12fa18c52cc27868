"""Which dataset rows a rank read at a step, from MindFormers' and MindSpore's own sharding rules.

MindFormers' ``CausalLanguageModelDataset`` reads a ``MindDataset`` with ``num_shards``/``shard_id``
from ``_generate_shard_info``: every rank its own shard in data-parallel mode; under semi-auto parallel
without full batch, ``num_shards`` is the dataset strategy's data-parallel size and ``shard_id`` is
``rank % (world / pipeline_stages) // model_parallel``; with full batch every rank reads every row. A
``data_loader.num_samples`` is divided by ``num_shards`` (``_reset_num_samples``). Unshuffled, MindSpore
gives shard ``r`` of ``D`` the rows ``r, r + D, r + 2D, ...`` of the files in name order, wrapping
around to make the shards equally long; batches of ``batch_size`` with ``drop_remainder`` make the
steps, and each epoch reads the same order again. On a resume MindFormers skips ``data_skip_steps``
steps of data (by default the restored step's), unless ``ignore_data_skip``.

MindFormers 2.x's PyNative trainer reads a ``MindDataset`` sharded the same way (``num_shards`` is its
data-parallel size, ``shard_id`` ``rank % (world / pipeline stages) // (tensor x context parallel)``),
in items of ``global batch / data parallel`` rows, one per step, whose first ``micro-batches x
local_batch_size`` rows the step uses (r2.0.0), or of ``local_batch_size`` rows, one per micro-batch
(later releases). Each epoch starts a new iterator. A resume sets the position to the restored step's
items, and every later epoch of that attempt starts there again (MindSpore's ``set_init_step`` stays on
the dataset): the rows follow that.

What is not reproduced says why (:attr:`DataOrder.unknown`): a shuffled order (MindSpore's seeded
shuffle in C++), loaders other than MindDataset, the classic trainer's gradient accumulation and
pipeline micro-batches. The dataset's length is read once, from the MindRecord index, at the first
incident.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mindformers_tbplugin.framework.running_config import data_skip_steps, get_path
from mindformers_tbplugin.framework.trainers import CLASSIC

_MINDRECORD = re.compile(r"mindrecord\d*$")


@dataclass
class DataOrder:
    """The rows of each step, or why they cannot be known."""

    unknown: str | None = None
    files: list[str] = field(default_factory=list)
    batch_size: int = 1
    num_shards: int | None = None  # None: no sharding (full batch)
    shard_of_rank: dict[int, int] = field(default_factory=dict)  # global rank -> shard id
    num_samples: int | None = None  # the whole dataset's, as configured
    first_step: int = 0  # the global step training started after
    data_steps_skipped: int = 0  # steps of data skipped at that start
    items_per_step: int = 1  # batches of batch_size rows a step reads
    rows_used: int | None = None  # rows of each batch the step trains on (None: all)
    restarts_at_resume: bool = False  # each epoch begins where the resumed attempt began (PyNative)
    _rows: int | None = None  # the dataset's length, read at first use

    def rows(self, rank: int, step: int) -> list[int] | None:
        """The dataset rows ``rank`` read at global ``step`` (counted from 1), or None when unknown."""
        if self.unknown is not None:
            return None
        total = self._length()
        shards = self.num_shards or 1
        shard = self.shard_of_rank.get(rank, 0) if self.num_shards else 0
        per_shard = math.ceil(total / shards)
        if self.num_samples:
            per_shard = min(per_shard, self.num_samples // shards)
        batches_per_epoch = per_shard // self.batch_size
        if batches_per_epoch <= 0:
            return None
        used = self.rows_used or self.batch_size
        rows = []
        for item in range(self.items_per_step):
            start = self._batch(step, item, batches_per_epoch) * self.batch_size
            rows += [((start + j) * shards + shard) % total for j in range(used)]
        return rows

    def _batch(self, step: int, item: int, per_epoch: int) -> int:
        """The batch of its epoch that ``step``'s ``item``-th read gets."""
        items = self.items_per_step
        if not self.restarts_at_resume:
            data_step = step - self.first_step + self.data_steps_skipped  # counted from 1
            return ((data_step - 1) * items + item) % per_epoch
        offset = (self.first_step * items) % per_epoch
        return offset + ((step - 1 - self.first_step) * items + item) % max(per_epoch - offset, 1)

    def _length(self) -> int:
        if self._rows is None:
            import mindspore.dataset as ds

            self._rows = ds.MindDataset(self.files, shuffle=False).get_dataset_size()
        return self._rows


def data_order(config: Mapping[str, Any] | None, world_size: int, first_step: int) -> DataOrder:
    """The data order of the running training's config (MindFormers' resolved one)."""
    if config is None:
        return DataOrder("no MindFormers config: a plain MindSpore training")
    dataset = get_path(config, "train_dataset") or get_path(config, "train_dataset_task.dataset_config") or {}
    loader = get_path(dataset, "data_loader") or {}
    if loader.get("type") != "MindDataset":
        return DataOrder(f"data_loader type {loader.get('type')!r}: rows are computed for MindDataset only")
    if loader.get("shuffle") is not False:
        return DataOrder("the data is shuffled (data_loader.shuffle): MindSpore's seeded shuffle is not reproduced")
    accumulation = int(get_path(config, "runner_config.gradient_accumulation_steps") or 1)
    micro = int(get_path(config, "parallel_config.micro_batch_num") or 1)
    stages = int(get_path(config, "parallel_config.pipeline_stage") or 1)
    if accumulation > 1 or (stages > 1 and micro > 1):
        return DataOrder("gradient accumulation or pipeline micro-batches: rows per step are not computed")
    files = _dataset_files(loader)
    if not files:
        return DataOrder("no MindRecord file found at data_loader.dataset_dir / dataset_files")
    num_shards, shards = _shards(config, world_size)
    skipped = data_skip_steps(config, first_step)
    return DataOrder(
        files=files,
        batch_size=int(dataset.get("batch_size") or get_path(config, "runner_config.batch_size") or 1),
        num_shards=num_shards,
        shard_of_rank=shards,
        num_samples=loader.get("num_samples") if isinstance(loader.get("num_samples"), int) else None,
        first_step=first_step,
        data_steps_skipped=skipped,
    )


def _dataset_files(loader: Mapping[str, Any]) -> list[str]:
    """The files as MindFormers' ``_process_mindrecord_data`` finds them: a folder walked, names sorted."""
    folder = loader.get("dataset_dir")
    if isinstance(folder, str) and os.path.isdir(folder):
        found = [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]
        return sorted(path for path in found if _MINDRECORD.search(path))
    if isinstance(folder, str) and _MINDRECORD.search(folder) and os.path.exists(folder):
        return [folder]
    files = loader.get("dataset_files")
    return [str(path) for path in files] if isinstance(files, (list, tuple)) else []


def _shards(config: Mapping[str, Any], world_size: int) -> tuple[int | None, dict[int, int]]:
    """``num_shards`` and each global rank's ``shard_id``, as MindFormers' ``_generate_shard_info``."""
    if world_size <= 1 or not config.get("use_parallel"):
        return None, {}
    from mindspore import context

    mode = str(context.get_auto_parallel_context("parallel_mode"))
    full_batch = bool(context.get_auto_parallel_context("full_batch"))
    if mode in ("semi_auto_parallel", "auto_parallel"):
        if full_batch:
            return None, {}
        stages = int(context.get_auto_parallel_context("pipeline_stages") or 1)
        data_parallel = int(context.get_auto_parallel_context("dataset_strategy")[0][0])
        model_parallel = world_size // stages // data_parallel
        return data_parallel, {rank: rank % (world_size // stages) // model_parallel for rank in range(world_size)}
    return world_size, {rank: rank for rank in range(world_size)}


def pynative_data_order(
    config: Mapping[str, Any], topology: Any, first_step: int, item_rows: int | None, micro_batches: int
) -> DataOrder:
    """The data order of MindFormers 2.x's PyNative trainer (``config``: its TrainConfig as a mapping;
    ``item_rows``: the batch size of the dataset it hands callbacks as ``train_dataset``;
    ``micro_batches``: its gradient accumulation steps)."""
    dataset = get_path(config, "train_dataset") or {}
    loader = get_path(dataset, "dataloader") or {}
    if loader.get("type") != "MindDataset":
        return DataOrder(f"dataloader type {loader.get('type')!r}: rows are computed for MindDataset only")
    if loader.get("shuffle"):
        return DataOrder("the data is shuffled (dataloader.shuffle): MindSpore's seeded shuffle is not reproduced")
    if loader.get("num_samples") is not None:
        return DataOrder("dataloader.num_samples is set: rows are computed for the whole dataset only")
    files = _pynative_files(loader.get("dataset_files"))
    local = int(get_path(config, "training.local_batch_size") or 1)
    if not files or not item_rows:
        return DataOrder("no MindRecord file found at dataloader.dataset_files, or no batch size")
    replicas = topology.data_parallel if topology.world_size > 1 else 1
    stage_ranks = max(topology.world_size // max(topology.pipeline_stages, 1), 1)
    per_replica = max(topology.ranks_per_replica, 1)
    shards = {rank: rank % stage_ranks // per_replica for rank in range(topology.world_size)}
    used = max(micro_batches, 1) * local  # the rows a step trains on
    return DataOrder(
        files=files,
        batch_size=item_rows,
        num_shards=replicas if replicas > 1 else None,
        shard_of_rank=shards if replicas > 1 else {},
        first_step=first_step,
        items_per_step=max(used // item_rows, 1),
        rows_used=min(item_rows, used),
        restarts_at_resume=True,
    )


def _pynative_files(dataset_files: Any) -> list[str]:
    """The files as the PyNative trainer's ``_get_mindrecord_files`` finds them (folders walked in the order
    the file system gives)."""
    paths = [dataset_files] if isinstance(dataset_files, str) else list(dataset_files or [])
    found: list[str] = []
    for path in paths:
        if not isinstance(path, str):
            continue
        if path.endswith(".mindrecord"):
            found.append(path)
        elif os.path.isdir(path):
            found += [
                os.path.join(root, name)
                for root, _, names in os.walk(path)
                for name in names
                if name.endswith(".mindrecord")
            ]
    return found


def data_order_of(start: Any) -> DataOrder:
    """The :class:`DataOrder` of a training at train begin (a TrainStart); never raises."""
    try:
        config = start.config.config if start.config is not None else None
        if start.trainer != CLASSIC:
            dataset = start.hook_args.get("train_dataset") if hasattr(start.hook_args, "get") else None
            batch = dataset.get_batch_size() if hasattr(dataset, "get_batch_size") else None
            micro = int(getattr(start.training, "num_accumulation_steps", 1) or 1)
            return pynative_data_order(config or {}, start.topology, start.facts.initial_global_step, batch, micro)
        return data_order(config, start.topology.world_size, start.facts.initial_global_step)
    except Exception as exc:  # an unexpected config layout: incidents say so instead of failing
        return DataOrder(f"the data order could not be read: {exc!r}")
