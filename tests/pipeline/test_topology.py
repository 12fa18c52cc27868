"""The parallel layout under semi-auto parallel, which every real MoE config uses and which does not
compile on a CPU ("Invalid backend: CPU"): the bundled real-size configs (MindFormers r1.9.0's
DeepSeek-V3 671B pretrain, Qwen3-MoE 30B-A3B and Qwen3 32B, parallel settings unchanged) at their
intended world sizes. MindFormers' own code decides what it decides at train begin (its dataset
strategy, full_batch and global batch size, with MindSpore's real auto-parallel context); our
Topology must then count the data-parallel replicas, pick the writing rank and count each replica's
throughput once. No device or collective is needed for that."""

from __future__ import annotations

import pytest
from conftest import REPO

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.aggregation import JobThroughput
from mindformers_tbplugin.pipeline.topology import Topology

pytestmark = pytest.mark.process  # imports MindSpore and MindFormers

CONFIGS = {  # file: (data_parallel, model_parallel, pipeline_stage, global batch as MindFormers computes it)
    "deepseek3/pretrain_deepseek3_671b_tb.yaml": (4, 8, 8, 128),  # 256 NPUs; 1 x 32 micro-batches x 4 replicas
    "qwen3_moe/pretrain_qwen3_30b_a3b_4k_tb.yaml": (1, 4, 4, 16),
    "qwen3/pretrain_qwen3_32b_4k_tb.yaml": (1, 4, 4, 4),
}


def mindformers_decisions(path: str) -> tuple[object, bool, int]:
    """(config, full_batch, global batch size) as MindFormers' BaseTrainer decides them for this config."""
    import mindspore as ms
    from mindformers.tools.register import MindFormerConfig
    from mindformers.trainer.base_trainer import BaseTrainer

    config = MindFormerConfig(str(REPO / "configs" / path))
    loader = config.train_dataset.data_loader
    dataset_config = loader.get("config") if loader.type == "BlendedMegatronDatasetDataLoader" else loader
    _, strategy, _, _ = BaseTrainer._get_columns_with_strategy(config, dataset_config, loader.type)
    ms.set_auto_parallel_context(
        parallel_mode="semi_auto_parallel", pipeline_stages=config.parallel_config.pipeline_stage
    )
    try:
        full_batch, _ = BaseTrainer._set_full_batch_with_strategy(config, strategy)

        class Trainer:  # what _check_global_batch_size_for_auto_parallel touches of its BaseTrainer
            get_pipeline_stages = staticmethod(BaseTrainer.get_pipeline_stages)

            def __init__(self) -> None:
                self.config = config

            def _reset_wrapper_for_pipeline_parallel(self) -> None:
                pass

        trainer = Trainer()
        BaseTrainer._check_global_batch_size_for_auto_parallel(trainer)
        return config, full_batch, trainer.global_batch_size
    finally:
        ms.reset_auto_parallel_context()


@pytest.mark.parametrize("path", CONFIGS)
def test_replicas_writer_and_throughput_of_a_published_config(path: str) -> None:
    dp, mp, pp, global_batch = CONFIGS[path]
    config, full_batch, mf_global_batch = mindformers_decisions(path)
    assert (config.parallel_config.data_parallel, config.parallel_config.model_parallel) == (dp, mp)
    assert mf_global_batch == global_batch
    world = dp * mp * pp
    ranks = [Topology.of(rank, world, pp, "semi_auto_parallel", full_batch, True, dp) for rank in range(world)]
    writer = world - world // pp  # the first rank of the last pipeline stage
    assert [t.rank for t in ranks if t.is_writer] == [writer]
    assert {t.data_parallel for t in ranks} == {dp}  # not world // pp: tensor-parallel ranks are no replicas
    speakers = [t.rank for t in ranks if t.speaks_for_a_replica]
    assert speakers == [writer + replica * (world // pp // dp) for replica in range(dp)]
    # samples per step: the per-card batch MindFormers sets times the ranks that read different batches
    assert config.runner_config.batch_size * ranks[writer].data_parallel_factor == global_batch
    # the job's samples/s: each replica's rate counted once
    step_time = 4.0
    rates = metrics.throughput(step_time, float(global_batch), config.model.model_config.seq_length)
    throughputs = [JobThroughput(t.data_parallel_factor, t.speaks_for_a_replica) for t in ranks]
    for throughput in throughputs:
        throughput.add(rates)
    total = sum(throughput.pack() for throughput in throughputs)
    job = throughputs[0].unpack(total)
    assert job[metrics.PERF_JOB_SAMPLES_PER_S] == pytest.approx(global_batch / step_time)


def test_the_old_count_took_tensor_parallel_ranks_for_replicas() -> None:
    """What Topology counted before it read MindFormers' data_parallel: DeepSeek-V3 671B's 32 ranks a stage."""
    old = Topology(224, 256, 8, "semi_auto_parallel", False, True)  # no ranks_per_replica: one rank each
    assert old.data_parallel == 32
    assert Topology.of(224, 256, 8, "semi_auto_parallel", False, True, 4).data_parallel == 4
    assert Topology.of(3, 8, 1, "data_parallel", False, True, 1).data_parallel == 8  # data parallel: every rank
