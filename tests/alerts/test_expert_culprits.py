"""The MoE layers and experts an alert on a ``moe/`` tag names (alerts/expert_culprits.py): the layer a
per-layer tag names; for the job-wide tags the layers with the most dead experts (at most three), else
the worst MaxVio; layers the writing rank does not hold are never blamed; only recent reads are kept."""

from __future__ import annotations

import numpy as np
from fakes import MOE_ROUTERS as ROUTERS

from mindformers_tbplugin.alerts.expert_culprits import KEPT_READS, ExpertCulprits
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.pipeline.expert_load import EXPERT_BIAS, LoadStatistics, RouterSet

NAN = np.nan


def alert_on(tag: str, step: int = 7) -> Alert:
    return Alert("expert_collapse", tag, step, 2.0, 1.0, "routing collapse", "warning", "warn")


def culprits_of(loads: list[list[float]], routers: RouterSet = ROUTERS, step: int = 7) -> ExpertCulprits:
    statistics = LoadStatistics(routers, dead_fraction=0.1)
    culprits = ExpertCulprits()
    culprits.remember(step, statistics.relative(np.array(loads)), statistics)
    return culprits


def test_an_alert_on_moe_tags_names_the_layers_with_dead_experts() -> None:
    statistics = LoadStatistics(ROUTERS, dead_fraction=0.1)
    relative = statistics.relative(np.array([[1, 1, 1, 1], [0.0, 0.0, 0.5, 0.5], [1, 1, 1, 1]], dtype=float))
    culprits = ExpertCulprits()
    culprits.remember(7, relative, statistics)
    alert = Alert("expert_collapse", "moe/dead_experts", 7, 2.0, 1.0, "routing collapse", "warning", "warn")
    assert culprits.annotate(alert).message == (
        "routing collapse; layers.2: experts 2, 3 took 2.00x, 2.00x the mean load; "
        "experts 0, 1 under 10% of it (0.00x, 0.00x)"
    )
    other_step = Alert("expert_collapse", "moe/dead_experts", 8, 2.0, 1.0, "routing collapse", "warning", "warn")
    assert culprits.annotate(other_step) == other_step  # no read of that step: unchanged
    loss = Alert("spike", "train/loss", 7, 9.0, 1.0, "spiked", "warning", "warn")
    assert culprits.annotate(loss) == loss


def test_an_alert_on_a_layers_tag_names_that_layer_even_when_another_has_dead_experts() -> None:
    # layers.1: [0.5, 0.3, 0.1, 0.1] over the mean 0.25 is [2, 1.2, 0.4, 0.4]: busy experts, none dead.
    culprits = culprits_of([[0.5, 0.3, 0.1, 0.1], [0.0, 0.0, 0.5, 0.5], [1, 1, 1, 1]])
    assert culprits.annotate(alert_on("moe/layers.1/max_violation")).message == (
        "routing collapse; layers.1: experts 0, 1 took 2.00x, 1.20x the mean load"
    )
    # A group name with dots (the MTP layer) is the part of the tag before its statistic.
    culprits = culprits_of([[1, 1, 1, 1], [1, 1, 1, 1], [0.0, 0.25, 0.25, 0.5]])
    assert culprits.annotate(alert_on("moe/mtp.layers.0/dead_experts")).message == (
        "routing collapse; mtp.layers.0: expert 3 took 2.00x the mean load; expert 0 under 10% of it (0.00x)"
    )


def test_without_dead_experts_a_job_wide_alert_names_the_worst_maxvio_layer() -> None:
    # MaxVio: layers.1 0.2 (1.2 - 1), layers.2 0.6, mtp.layers.0 0: layers.2 is named, alone.
    culprits = culprits_of([[0.3, 0.2, 0.25, 0.25], [0.4, 0.2, 0.2, 0.2], [1, 1, 1, 1]])
    assert culprits.annotate(alert_on("moe/max_violation")).message == (
        "routing collapse; layers.2: expert 0 took 1.60x the mean load"
    )


def test_the_layers_with_the_most_dead_experts_come_first_three_at_most() -> None:
    routers = RouterSet(("layers.1", "layers.2", "layers.3", "layers.4"), 4, 2, (EXPERT_BIAS,) * 4)
    one_dead = [0.0, 0.25, 0.25, 0.5]  # relative [0, 1, 1, 2]
    two_dead = [0.0, 0.0, 0.5, 0.5]  # relative [0, 0, 2, 2]
    culprits = culprits_of([one_dead, two_dead, one_dead, one_dead], routers)
    # layers.2 (two dead), then the layers with one in their order; layers.4 is the fourth: left out.
    assert culprits.annotate(alert_on("moe/dead_experts")).message == (
        "routing collapse; "
        "layers.2: experts 2, 3 took 2.00x, 2.00x the mean load; experts 0, 1 under 10% of it (0.00x, 0.00x); "
        "layers.1: expert 3 took 2.00x the mean load; expert 0 under 10% of it (0.00x); "
        "layers.3: expert 3 took 2.00x the mean load; expert 0 under 10% of it (0.00x)"
    )


def test_layers_this_rank_does_not_hold_are_never_named() -> None:
    # layers.1 has no load here (a pipeline stage of other ranks): its NaN row is neither dead nor worst.
    culprits = culprits_of([[0.0, 0.0, 0.0, 0.0], [0.3, 0.2, 0.25, 0.25], [1, 1, 1, 1]])
    assert culprits.annotate(alert_on("moe/max_violation")).message == (
        "routing collapse; layers.2: expert 0 took 1.20x the mean load"
    )
    nothing_held = culprits_of([[0.0] * 4] * 3)
    assert nothing_held.annotate(alert_on("moe/max_violation")) == alert_on("moe/max_violation")


def test_only_the_last_reads_are_kept() -> None:
    statistics = LoadStatistics(ROUTERS, dead_fraction=0.1)
    relative = statistics.relative(np.array([[0.0, 0.0, 0.5, 0.5], [1, 1, 1, 1], [1, 1, 1, 1]]))
    culprits = ExpertCulprits()
    for step in range(1, KEPT_READS + 2):  # one read more than kept: step 1's is dropped
        culprits.remember(step, relative, statistics)
    assert culprits.annotate(alert_on("moe/dead_experts", step=1)) == alert_on("moe/dead_experts", step=1)
    assert culprits.annotate(alert_on("moe/dead_experts", step=2)).message.startswith("routing collapse; layers.1:")
