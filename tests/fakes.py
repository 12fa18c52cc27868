"""The simulated job the pipeline's tests run, without MindSpore: each rank's MetricRouter in its own
thread with its own writers, and a fake collective whose ``all_reduce_sum`` really sums the vectors
every rank passed (a barrier stands in for the collective's synchronisation). Recording writers stand
in for RunWriter. The real collectives run under msrun in tests/jobs/test_msrun_jobs.py.

And events as other writers write them (TensorFlow 2's tensor scalars), for the readers' tests; and
the MoE layers of a tiny mixture-of-experts model, for the expert-load tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tensorboardX.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

from mindformers_tbplugin.pipeline.expert_load import EXPERT_BIAS, RouterSet
from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
from mindformers_tbplugin.pipeline.topology import Topology

LOSS, LR = "train/loss", "train/lr"
STEP_TIME, RSS = "perf/step_time_ms", "system/host_rss_gb"
# A tiny DeepSeek-V3's MoE layers: two decoder layers and the multi-token-prediction layer, 4 experts, top 2.
MOE_ROUTERS = RouterSet(("layers.1", "layers.2", "mtp.layers.0"), 4, 2, (EXPERT_BIAS, EXPERT_BIAS, EXPERT_BIAS))


class Group:
    """The world group of a simulated job: collectives meet at a barrier and combine every rank's input."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._barrier = threading.Barrier(world_size, timeout=20)
        self._inputs: list[np.ndarray | None] = [None] * world_size

    def _exchange(self, rank: int, vector: np.ndarray) -> list[np.ndarray]:
        self._inputs[rank] = np.array(vector, dtype=np.float32, copy=True)
        self._barrier.wait()  # every rank's input is in
        inputs = list(self._inputs)
        self._barrier.wait()  # every rank has read them: the next collective may overwrite
        return inputs

    def abort(self) -> None:
        self._barrier.abort()


class FakeCollectives:
    """One rank's side of the collectives, counted like framework.collectives.Collectives."""

    def __init__(self, group: Group, rank: int) -> None:
        self.group, self.rank = group, rank
        self.calls = 0
        self.sizes: list[int] = []
        self.reduced_bytes, self.reduce_seconds = 0, 0.0

    def all_reduce_sum(self, vector: np.ndarray) -> np.ndarray:
        self.calls += 1
        self.sizes.append(vector.size)
        self.reduced_bytes += vector.nbytes
        inputs = self.group._exchange(self.rank, vector)
        return np.sum(np.stack(inputs), axis=0, dtype=np.float32)

    def all_gather(self, vector: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.stack(self.group._exchange(self.rank, vector))


class RecordingWriter:
    """The RunWriter methods the router calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, float]]] = []
        self.texts: list[tuple[int, str, str]] = []

    def add_scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        self.calls.append((step, dict(values)))

    def add_text(self, step: int, tag: str, text: str, wall_time: float | None = None) -> None:
        self.texts.append((step, tag, text))

    def add_scalars_from(self, step: int, compute: Callable[[], dict[str, float]]) -> None:
        """Computed at once, as the writer thread would later."""
        values = compute()
        if values:
            self.calls.append((step, dict(values)))

    def add_built(self, step: int, build: Callable) -> None:
        build(step, 1.0)  # run, as the writer thread would, for what it keeps; nothing recorded

    def flush(self) -> bool:
        return True

    def series(self, tag: str) -> list[tuple[int, float]]:
        return [(step, values[tag]) for step, values in self.calls if tag in values]

    def tags(self) -> set[str]:
        return {tag for _, values in self.calls for tag in values}


@dataclass
class Rank:
    topology: Topology
    router: MetricRouter
    main: RecordingWriter | None
    rank_run: RecordingWriter | None
    collectives: FakeCollectives


FORWARDED_OPTIONS = ("routers", "expert_", "dead_", "aggregate_seconds")  # RouterOptions fields passed as given


def make_job(
    world_size: int,
    stages: int = 1,
    aggregate_every: int = 4,
    topk_ranks: int = 0,
    rank_runs: bool = True,
    full_batch: bool = False,
    **options: object,
) -> list[Rank]:
    """One router per rank, wired as TensorBoardMonitor wires them: a main-run writer on the writer
    rank only, a rank run on every rank when per-rank runs are on (then ``topk_ranks`` is 0)."""
    group = Group(world_size)
    ranks = []
    for rank in range(world_size):
        topology = Topology(rank, world_size, stages, "semi_auto_parallel", full_batch, communicating=True)
        main = RecordingWriter() if topology.is_writer else None
        rank_run = RecordingWriter() if rank_runs else None
        collectives = FakeCollectives(group, rank)
        router_options = RouterOptions(
            aggregate_every=aggregate_every,
            rank_policy=str(options.get("rank_policy", "writer")),
            topk_ranks=topk_ranks,
            vs_samples=bool(options.get("vs_samples", False)),
            vs_tokens=False,
            samples_per_step=options.get("samples_per_step"),  # type: ignore[arg-type]
            tokens_per_sample=None,
            gradient_groups=options.get("gradient_groups"),  # type: ignore[arg-type]
            rank_layout=options.get("rank_layout") if topology.is_writer else None,  # type: ignore[arg-type]
            rank_records=bool(options.get("rank_records", True)),
            **{key: value for key, value in options.items() if key.startswith(FORWARDED_OPTIONS)},
        )
        router = MetricRouter(topology, router_options, main, rank_run, collectives)  # type: ignore[arg-type]
        ranks.append(Rank(topology, router, main, rank_run, collectives))
    return ranks


def run_ranks(group_of: list[Rank] | Group, scripts: list[Callable[[], None]]) -> None:
    """Run each rank's script in its own thread, as the ranks of a job run side by side."""
    group = group_of[0].collectives.group if isinstance(group_of, list) else group_of
    errors: list[BaseException] = []

    def guarded(script: Callable[[], None]) -> None:
        try:
            script()
        except BaseException as exc:
            errors.append(exc)
            group.abort()  # the other ranks leave their collective instead of waiting for this one

    threads = [threading.Thread(target=guarded, args=(script,), daemon=True) for script in scripts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a simulated rank hangs"
    if errors:
        raise errors[0]


def train(
    ranks: list[Rank],
    steps: range,
    metrics_of: Callable[[int, int], StepMetrics],
    before_step: Callable[[int, int], None] | None = None,
    after_step: Callable[[int, int], None] | None = None,
) -> None:
    """Every rank logs ``steps`` (``metrics_of(rank, step)``), then ends cleanly."""

    def script(rank: Rank) -> Callable[[], None]:
        def run() -> None:
            for step in steps:
                if before_step is not None:
                    before_step(rank.topology.rank, step)
                rank.router.log_step(metrics_of(rank.topology.rank, step))
                if after_step is not None:
                    after_step(rank.topology.rank, step)
            rank.router.finish(clean=True)

        return run

    run_ranks(ranks, [script(rank) for rank in ranks])


def dp_metrics(rank: int, step: int) -> StepMetrics:
    """Rank 1's loss is rank 0's + 2 (their mean: step + 1.5); rank 1 is 200 ms slower and uses less memory.
    All values are exact in float32, the collective's type."""
    return StepMetrics(
        step,
        data={LOSS: step + 0.5 + 2.0 * rank},
        model={LR: 0.001 * step},
        system={STEP_TIME: 100.0 + 200.0 * rank + step, RSS: 2.0 - 0.5 * rank},
    )


def tensor_scalar_summary(tag: str, value: float, with_metadata: bool, dtype: int = 1) -> summary_pb2.Summary:
    """A TensorFlow-2-style scalar: a rank-0 tensor; the scalars-plugin metadata only on the first write."""
    metadata = None
    if with_metadata:
        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        )
    shape = tensor_shape_pb2.TensorShapeProto()
    if dtype == 1:
        tensor = tensor_pb2.TensorProto(dtype=1, float_val=[value], tensor_shape=shape)
    else:  # double in tensor_content, as tf.make_tensor_proto writes it
        tensor = tensor_pb2.TensorProto(dtype=2, tensor_content=np.float64(value).tobytes(), tensor_shape=shape)
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)])
