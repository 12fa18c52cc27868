"""Which rows a rank read at a step (framework/data_rows.py), checked against the rows MindSpore's own
MindDataset reads back, with MindFormers' sharding and batching, over two epochs; and the reasons given
when the order cannot be known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mindformers_tbplugin.framework.data_rows import DataOrder, data_order

pytestmark = pytest.mark.process  # imports MindSpore


def _indexed_mindrecord(path: Path, rows: int) -> Path:
    """``rows`` rows whose ``input_ids`` hold their own index, so a read-back names each row."""
    from mindspore.mindrecord import FileWriter

    writer = FileWriter(str(path), shard_num=1, overwrite=True)
    writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "indexed")
    writer.write_raw_data([{"input_ids": np.full(4, index, np.int32)} for index in range(rows)])
    writer.commit()
    return path


def _read_back(path: Path, shards: int, shard: int, batch: int, per_shard: int | None, epochs: int) -> list[list[int]]:
    """The batches MindDataset gives a shard, as MindFormers builds it (unshuffled, drop_remainder)."""
    import mindspore.dataset as ds

    dataset = ds.MindDataset(
        str(path), columns_list=["input_ids"], shuffle=False, num_shards=shards, shard_id=shard, num_samples=per_shard
    )
    dataset = dataset.batch(batch, drop_remainder=True).repeat(epochs)
    return [[int(row[0]) for row in item["input_ids"]] for item in dataset.create_dict_iterator(output_numpy=True)]


CASES = [(11, 2, 2, None), (11, 3, 2, None), (20, 2, 3, 12)]  # rows, shards, batch size, data_loader.num_samples


@pytest.mark.parametrize(("rows", "shards", "batch", "num_samples"), CASES)
def test_the_rows_of_each_step_are_those_mindspore_reads(
    tmp_path: Path, rows: int, shards: int, batch: int, num_samples: int | None
) -> None:
    path = _indexed_mindrecord(tmp_path / "indexed.mindrecord", rows)
    per_shard = num_samples // shards if num_samples else None  # MindFormers' _reset_num_samples
    for shard in range(shards):
        order = DataOrder(
            files=[str(path)],
            batch_size=batch,
            num_shards=shards,
            shard_of_rank={rank: rank for rank in range(shards)},
            num_samples=num_samples,
        )
        read = _read_back(path, shards, shard, batch, per_shard, epochs=2)
        assert [order.rows(shard, step) for step in range(1, len(read) + 1)] == read, (shard, read)


def test_a_resume_counts_the_skipped_steps_of_data(tmp_path: Path) -> None:
    path = _indexed_mindrecord(tmp_path / "indexed.mindrecord", 16)
    fresh = DataOrder(files=[str(path)], batch_size=2)
    resumed = DataOrder(files=[str(path)], batch_size=2, first_step=4, data_steps_skipped=6)
    assert resumed.rows(0, 5) == fresh.rows(0, 7)  # 2 batches past the checkpoint's data position


def test_the_config_says_what_can_be_known(tmp_path: Path) -> None:
    path = _indexed_mindrecord(tmp_path / "indexed.mindrecord", 8)
    loader = {"type": "MindDataset", "dataset_dir": str(path), "shuffle": False}
    plain = data_order({"train_dataset": {"data_loader": loader, "batch_size": 2}}, 1, 0)
    assert plain.unknown is None and plain.rows(0, 2) == [2, 3]
    resumed = {"train_dataset": {"data_loader": loader, "batch_size": 2}, "resume_training": True}
    assert data_order(resumed, 1, 3).rows(0, 4) == [6, 7]  # the restored step's data skipped: as in one go
    shuffled = {"train_dataset": {"data_loader": {**loader, "shuffle": True}}}
    assert "shuffle" in data_order(shuffled, 1, 0).unknown and data_order(shuffled, 1, 0).rows(0, 1) is None
    assert "MindDataset only" in data_order({"train_dataset": {"data_loader": {"type": "HFDataLoader"}}}, 1, 0).unknown
    accumulating = {"train_dataset": {"data_loader": loader}, "runner_config": {"gradient_accumulation_steps": 4}}
    assert "accumulation" in data_order(accumulating, 1, 0).unknown
    assert "plain MindSpore" in data_order(None, 1, 0).unknown
