"""The ranks plugin's layout of a job (pipeline/rank_layout.py), from what each rank sends in the
run-folder all-gather at train begin: its host name's hash, its node (the launcher's node rank, else
hosts in the order of their first rank), the nodes' names, the worker-log pattern and the record
stride. The gather itself: tests/pipeline/test_rank_records.py."""

from __future__ import annotations

from mindformers_tbplugin.pipeline import rank_layout
from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout


def test_nodes_are_the_launchers_node_ranks_else_hosts_in_order_of_their_first_rank() -> None:
    a, b, c = (rank_layout.host_hash(name) for name in ("alpha", "beta", "gamma"))
    assert rank_layout.node_indices([1, 1, 0, 0], [a, a, b, b]) == (1, 1, 0, 0)
    assert rank_layout.node_indices([1, -1, 0, 0], [b, b, a, c]) == (0, 0, 1, 2)  # one rank without it
    assert rank_layout.node_names((0, 0, 1, 2), 2, "alpha") == ("node 0", "node 1 (alpha)", "node 2")


def test_the_layout_round_trips_through_its_plugin_content() -> None:
    layout = rank_layout.build_layout((0, 0, 1, 1), 0, "alpha", 10, 1024, "/out/msrun_log/")
    assert layout.worker_log == "/out/msrun_log/{node}/worker_{rank}.log"
    assert layout.intervals_per_record == 1 and layout.channels == CHANNELS
    assert RankLayout.from_content(layout.content()) == layout
    assert rank_layout.build_layout((0,), 0, "alpha", 10, 1024, None).worker_log is None


def test_a_host_hash_is_the_crc32_of_the_name_the_same_in_every_process() -> None:
    # CRC-32's published check value: "123456789" -> 0xCBF43926. Python's hash() would differ per process.
    assert rank_layout.host_hash("123456789") == 0xCBF43926
    assert rank_layout.host_hash("worker-1") != rank_layout.host_hash("worker-2")


def test_without_any_node_rank_hosts_are_numbered_in_the_order_of_their_first_rank() -> None:
    a, b, c = (rank_layout.host_hash(name) for name in ("alpha", "beta", "gamma"))
    no_node = rank_layout.NO_NODE_RANK
    assert rank_layout.node_indices([no_node] * 4, [b, a, b, c]) == (0, 1, 0, 2)
    assert rank_layout.node_indices([], [c, c, a]) == (0, 0, 1)  # an older launcher sent none
    assert rank_layout.node_indices([0, 0], [a, b]) == (0, 0)  # the launcher's word wins over the hosts


def test_every_node_up_to_the_highest_index_gets_a_name() -> None:
    # The launcher's node ranks 0 and 2: node 1 holds no rank of this job but keeps its index.
    assert rank_layout.node_names((2, 0), 0, "gamma") == ("node 0", "node 1", "node 2 (gamma)")
    assert rank_layout.node_names((), 0, "alpha") == ()


def test_the_worker_log_pattern_is_the_launchers_folder_with_node_and_rank_to_fill_in() -> None:
    assert rank_layout.worker_log_pattern("/out/msrun_log") == "/out/msrun_log/{node}/worker_{rank}.log"
    assert rank_layout.worker_log_pattern("") is None  # MFTB_WORKER_LOGS set but empty: unknown
    assert rank_layout.worker_log_pattern(None) is None


def test_a_large_job_gets_one_record_per_several_intervals() -> None:
    layout = rank_layout.build_layout((0,) * 8192, 0, "alpha", 10, 1024, None)
    # 8192 ranks x 5 channels x 2 bytes + 100 = 82,020 bytes over 10 steps x 1024: ceil(8.01) intervals.
    assert (layout.world_size, layout.steps_per_interval, layout.intervals_per_record) == (8192, 10, 9)
    assert layout.node_names == ("node 0 (alpha)",)
