"""Per-layer norms without MindSpore: parameter names to groups (legacy LLaMA/Qwen and mcore models),
group norms from per-parameter squared norms, and their cross-rank combination on simulated ranks (the
fake collective really sums). The names of real mcore models built by MindFormers (a process test);
the groups an alert names: tests/alerts/test_culprits.py; real trainings:
tests/framework/test_layer_norms.py; a real 2-rank job: tests/jobs/test_msrun_jobs.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import BUILD_MCORE_MODELS, printed_json
from fakes import make_job, train

from mindformers_tbplugin.pipeline.aggregation import GradientAggregator
from mindformers_tbplugin.pipeline.gradient_groups import GroupLayout, layer_group, log10_norms
from mindformers_tbplugin.pipeline.metrics import StepMetrics

LEGACY_LLAMA = [  # the tiny LLaMA's optimizer order (norm weights after the head: weight-decay groups)
    "model.tok_embeddings.embedding_weight",
    "model.layers.0.attention.wq.weight",
    "model.layers.0.feed_forward.w2.weight",
    "model.layers.1.attention.wv.weight",
    "model.layers.10.attention.wo.weight",
    "lm_head.weight",
    "model.layers.0.ffn_norm.weight",
    "model.layers.1.attention_norm.weight",
    "model.norm_out.weight",
]
# Real names of MindFormers' mcore models (mindformers/parallel_core GPTModel, built with ``auto_prefix=False``
# so without a ``model.`` prefix): TrainingQwen3ForCausalLM and TrainingDeepseekV3ForCausalLM (MoE from layer 1,
# ``num_nextn_predict_layers: 1``) of mindformers 1.9.0 and 2.0.0 with ``use_legacy: False``, 2 layers, hidden 64.
# test_real_mcore_models_group_by_layer builds them.
MCORE = {
    "embedding.word_embeddings.weight": "embedding",
    "decoder.layers.0.input_layernorm.weight": "layers.0",
    "decoder.layers.0.self_attention.linear_qkv.weight": "layers.0",
    "decoder.layers.0.self_attention.q_layernorm.weight": "layers.0",
    "decoder.layers.0.mlp.linear_fc1.weight": "layers.0",
    "decoder.layers.1.self_attention.linear_kvb.weight": "layers.1",
    "decoder.layers.1.mlp.router.weight": "layers.1",
    "decoder.layers.11.mlp.experts.weight1": "layers.11",
    "decoder.layers.1.mlp.shared_experts.linear_fc2.weight": "layers.1",
    "decoder.final_layernorm.weight": "final_norm",
    "mtp.layers.0.enorm.weight": "mtp.layers.0",
    "mtp.layers.0.eh_proj.weight": "mtp.layers.0",
    "mtp.layers.0.transformer_layer.mlp.experts.weight2": "mtp.layers.0",
    "mtp.layers.0.final_layernorm.weight": "mtp.layers.0",
    "output_layer.weight": "head",
    "model.decoder.layers.2.pre_mlp_layernorm.weight": "layers.2",  # the same, held by a cell as ``model``
    "model.mtp.layers.0.hnorm.weight": "mtp.layers.0",
    "model.something_else.bias": "other",
}


def test_legacy_llama_and_qwen_names_group_by_layer_in_numeric_order() -> None:
    layout = GroupLayout.of(LEGACY_LLAMA, "layer")
    assert layout.groups == ("embedding", "layers.0", "layers.1", "layers.10", "final_norm", "head")
    assert [layout.groups[i] for i in layout.index] == [
        "embedding", "layers.0", "layers.0", "layers.1", "layers.10", "head", "layers.0", "layers.1", "final_norm"
    ]  # fmt: skip


@pytest.mark.parametrize(("name", "group"), MCORE.items())
def test_mcore_names_group_by_layer(name: str, group: str) -> None:
    assert layer_group(name) == group


# Where each part of a GPTModel lives: layers.N and mtp.layers.N by their index.
MCORE_PARTS = {"embedding.": "embedding", "decoder.final_layernorm.": "final_norm", "output_layer.": "head"}


@pytest.mark.process
def test_real_mcore_models_group_by_layer(tmp_path: Path) -> None:
    names = printed_json(BUILD_MCORE_MODELS, tmp_path, "NAMES")
    for model, groups in {
        "qwen3": ("embedding", "layers.0", "layers.1", "final_norm", "head"),
        "deepseek_v3": ("embedding", "layers.0", "layers.1", "mtp.layers.0", "final_norm", "head"),
    }.items():
        assert GroupLayout.of(names[model], "layer").groups == groups, model
        for name in names[model]:
            parts = name.split(".")
            if parts[0] == "decoder" and parts[1] == "layers":
                expected = f"layers.{parts[2]}"
            elif parts[0] == "mtp":
                expected = f"mtp.layers.{parts[2]}"
            else:
                expected = next((g for prefix, g in MCORE_PARTS.items() if name.startswith(prefix)), "unknown")
            assert layer_group(name) == expected, name
    deepseek = names["deepseek_v3"]
    assert "decoder.layers.1.mlp.experts.weight1" in deepseek and "mtp.layers.0.enorm.weight" in deepseek


def test_param_grouping_keeps_every_parameter_and_patterns_name_their_groups() -> None:
    assert GroupLayout.of(LEGACY_LLAMA, "param").groups == tuple(LEGACY_LLAMA)
    layout = GroupLayout.of(LEGACY_LLAMA, ["*attention.w*", "*feed_forward*"])
    assert set(layout.groups) == {"*attention.w*", "*feed_forward*", "other"}
    squares = np.arange(1.0, len(LEGACY_LLAMA) + 1)
    tags = layout.tags("grad_norm/", layout.group_squares(squares), "grad_norm/total")
    assert tags["grad_norm/*feed_forward*"] == pytest.approx(math.sqrt(3.0))
    assert tags["grad_norm/*attention.w*"] == pytest.approx(math.sqrt(2.0 + 4.0 + 5.0))


def test_group_norms_compose_to_the_total() -> None:
    layout = GroupLayout.of(LEGACY_LLAMA, "layer")
    squares = np.random.default_rng(0).random(len(LEGACY_LLAMA)) ** 4
    tags = layout.tags("grad_norm/", layout.group_squares(squares), "grad_norm/total")
    groups = [value for tag, value in tags.items() if tag != "grad_norm/total"]
    assert sum(v * v for v in groups) == pytest.approx(squares.sum(), rel=1e-12)
    assert tags["grad_norm/total"] ** 2 == pytest.approx(squares.sum(), rel=1e-12)


def test_log10_norms_leave_zero_gradients_out() -> None:
    values = log10_norms(np.array([1e-4, 0.0, 100.0]))
    assert values[0] == pytest.approx(-2.0) and values[2] == pytest.approx(1.0) and np.isneginf(values[1])


def test_the_aggregator_averages_squares_over_the_ranks_that_hold_each_group() -> None:
    ranks = [GradientAggregator(4, 2) for _ in range(3)]
    for rank, aggregator in enumerate(ranks):
        aggregator.add(1, np.array([1.0 + rank, 4.0]))
        aggregator.add(2, None if rank == 2 else np.array([9.0, 16.0 * (rank + 1)]))  # rank 2 had none
        # step 3: the first group lives on rank 0 only (a pipeline stage), the second on ranks 1 and 2
        aggregator.add(3, np.array([25.0, 0.0]) if rank == 0 else np.array([0.0, 2.0 * rank]))
        aggregator.add(4, None)  # nobody had values: the step is not written
    reduced = np.sum([aggregator.pack() for aggregator in ranks], axis=0)
    means = ranks[0].unpack(reduced)
    assert means[1].tolist() == [2.0, 4.0]
    assert means[2].tolist() == [9.0, 24.0]
    assert means[3].tolist() == [25.0, 3.0]
    assert sorted(means) == [1, 2, 3]
    assert ranks[0].pending == []


def test_group_norms_of_two_ranks_are_the_root_mean_square_written_at_their_own_steps() -> None:
    layout = GroupLayout.of(["model.layers.0.w", "model.layers.1.w", "lm_head.weight"], "layer")
    ranks = make_job(2, aggregate_every=4, gradient_groups=layout, rank_policy="all")

    def metrics_of(rank: int, step: int) -> StepMetrics:
        step_metrics = StepMetrics(step, data={"train/loss": 1.0})
        step_metrics.grad_squares = np.array([1.0, 4.0, 9.0]) * (step + 3 * rank)
        return step_metrics

    train(ranks, range(1, 7), metrics_of)
    main = ranks[0].main
    for step in range(1, 7):
        mean_scale = (step + step + 3) / 2
        expected = {"layers.0": 1.0, "layers.1": 4.0, "head": 9.0}
        for group, square in expected.items():
            ((_, value),) = [(s, v) for s, v in main.series(f"grad_norm/{group}") if s == step]
            assert value == pytest.approx(math.sqrt(square * mean_scale), rel=1e-6)
        ((_, total),) = [(s, v) for s, v in main.series("grad_norm/total") if s == step]
        assert total == pytest.approx(math.sqrt(14.0 * mean_scale), rel=1e-6)
    # one event per step: the group norms travel with the loss of their step
    assert all("train/loss" in values for _, values in main.calls if "grad_norm/total" in values)
    # rank_policy all: each rank's own values in its rank run
    own = ranks[1].rank_run.series("grad_norm/head")
    assert own == [(step, pytest.approx(math.sqrt(9.0 * (step + 3)))) for step in range(1, 7)]
    assert {size for rank in ranks for size in rank.collectives.sizes} == {ranks[0].collectives.sizes[0]}


def test_a_stretched_interval_carries_the_group_norms_of_every_step() -> None:
    # Simulated steps are fast: after the first interval the ranks agree on the longest one.
    layout = GroupLayout.of(["model.layers.0.w", "lm_head.weight"], "layer")
    ranks = make_job(2, aggregate_every=4, aggregate_seconds=3600.0, gradient_groups=layout)

    def metrics_of(rank: int, step: int) -> StepMetrics:
        step_metrics = StepMetrics(step, data={"train/loss": 1.0})
        step_metrics.grad_squares = np.array([1.0, 4.0]) * (step + 3 * rank)
        return step_metrics

    train(ranks, range(1, 31), metrics_of)
    totals = ranks[0].main.series("grad_norm/total")
    assert totals == [(step, pytest.approx(math.sqrt(5.0 * (step + 1.5)), rel=1e-6)) for step in range(1, 31)]
    assert all(rank.collectives.calls == 2 for rank in ranks)


def test_one_rank_writes_its_own_group_norms_at_once() -> None:
    layout = GroupLayout.of(["model.layers.0.w", "lm_head.weight"], "layer")
    (rank,) = make_job(1, aggregate_every=4, gradient_groups=layout, rank_runs=False)

    def metrics_of(_rank: int, step: int) -> StepMetrics:
        step_metrics = StepMetrics(step, data={"train/loss": 1.0})
        step_metrics.grad_squares = np.array([4.0, 9.0])
        return step_metrics

    train([rank], range(1, 3), metrics_of)
    assert rank.main.series("grad_norm/layers.0") == [(1, 2.0), (2, 2.0)]
    assert rank.main.series("grad_norm/total") == [(step, pytest.approx(math.sqrt(13.0))) for step in (1, 2)]


def test_without_aggregation_a_multi_rank_job_writes_the_writer_ranks_own_under_local() -> None:
    layout = GroupLayout.of(["model.layers.0.w", "lm_head.weight"], "layer")
    ranks = make_job(2, aggregate_every=0, gradient_groups=layout, rank_runs=False)

    def metrics_of(rank: int, step: int) -> StepMetrics:
        step_metrics = StepMetrics(step, data={"train/loss": 1.0})
        step_metrics.grad_squares = np.array([4.0, 9.0]) * (1 + rank)
        return step_metrics

    train(ranks, range(1, 3), metrics_of)
    assert ranks[0].main.series("local/grad_norm/layers.0") == [(1, 2.0), (2, 2.0)]
    assert not [tag for tag in ranks[0].main.tags() if tag.startswith("grad_norm/")]


@pytest.mark.parametrize("value", ["layers", [], ["*attention*", " "], 3])
def test_a_wrong_norm_groups_is_reported_with_what_is_allowed(value: object) -> None:
    from mindformers_tbplugin.callbacks import TensorBoardMonitor
    from mindformers_tbplugin.schema import check_entry

    (problem,) = check_entry(TensorBoardMonitor, {"norm_groups": value})
    assert problem.key == "norm_groups"
    assert "expected 'layer', 'param' or a non-empty list of name patterns" in problem.message


@pytest.mark.parametrize("value", ["layer", "param", ["*attention*", "*feed_forward*"]])
def test_the_norm_groups_users_write_are_accepted(value: object) -> None:
    from mindformers_tbplugin.callbacks import TensorBoardMonitor
    from mindformers_tbplugin.schema import check_entry

    assert check_entry(TensorBoardMonitor, {"norm_groups": value}) == []
