"""The ranks plugin's layout of a job (pipeline/rank_layout.py), from what each rank sends in the
run-folder all-gather at train begin: its host name, its node (the launcher's node rank, else hosts in
the order of their first rank), the nodes' names, the worker-log pattern and the record stride. The
gather itself: tests/session/test_run_folder.py and tests/pipeline/test_rank_records.py."""

from __future__ import annotations

from mindformers_tbplugin.pipeline import rank_layout
from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout

NO_NODE = rank_layout.NO_NODE_RANK


def test_nodes_are_the_launchers_node_ranks_else_hosts_in_order_of_their_first_rank() -> None:
    assert rank_layout.node_indices([1, 1, 0, 0], ["alpha", "alpha", "beta", "beta"]) == (1, 1, 0, 0)
    assert rank_layout.node_indices([1, -1, 0, 0], ["beta", "beta", "alpha", "gamma"]) == (0, 0, 1, 2)


def test_every_node_is_named_by_its_host() -> None:
    nodes = rank_layout.node_indices([0, 0, 1, 1, 2], ["alpha", "alpha", "beta", "beta", "gamma"])
    assert rank_layout.node_names(nodes, ["alpha", "alpha", "beta", "beta", "gamma"]) == ("alpha", "beta", "gamma")
    assert rank_layout.node_names((0, 1), ["节点-a", "节点-b"]) == ("节点-a", "节点-b")  # non-ASCII host names


def test_nodes_sharing_a_host_name_and_nodes_without_ranks_are_told_apart_by_index() -> None:
    # Containers on two machines with one host name; the launcher's node ranks 0 and 2 (node 1 holds none).
    assert rank_layout.node_names((0, 2), ["worker", "worker"]) == ("worker (node 0)", "node 1", "worker (node 2)")
    assert rank_layout.node_names((0, 1), ["", "beta"]) == ("node 0", "beta")  # a rank that sent no name
    assert rank_layout.node_names((), []) == ()


def test_the_layout_round_trips_through_its_plugin_content() -> None:
    layout = rank_layout.build_layout([0, 0, 1, 1], ["a", "a", "b", "b"], 10, 1024, "/out/msrun_log/")
    assert layout.worker_log == "/out/msrun_log/{node}/worker_{rank}.log"
    assert layout.intervals_per_record == 1 and layout.channels == CHANNELS
    assert (layout.nodes, layout.node_names) == ((0, 0, 1, 1), ("a", "b"))
    assert RankLayout.from_content(layout.content()) == layout
    assert rank_layout.build_layout([0], ["a"], 10, 1024, None).worker_log is None


def test_without_any_node_rank_hosts_are_numbered_in_the_order_of_their_first_rank() -> None:
    assert rank_layout.node_indices([NO_NODE] * 4, ["b", "a", "b", "c"]) == (0, 1, 0, 2)
    assert rank_layout.node_indices([], ["c", "c", "a"]) == (0, 0, 1)  # an older launcher sent none
    assert rank_layout.node_indices([0, 0], ["a", "b"]) == (0, 0)  # the launcher's word wins over the hosts


def test_the_worker_log_pattern_is_the_launchers_folder_with_node_and_rank_to_fill_in() -> None:
    assert rank_layout.worker_log_pattern("/out/msrun_log") == "/out/msrun_log/{node}/worker_{rank}.log"
    assert rank_layout.worker_log_pattern("") is None  # MFTB_WORKER_LOGS set but empty: unknown
    assert rank_layout.worker_log_pattern(None) is None


def test_a_large_job_gets_one_record_per_several_intervals() -> None:
    layout = rank_layout.build_layout([0] * 8192, ["alpha"] * 8192, 10, 1024, None)
    # 8192 ranks x 5 channels x 2 bytes + 100 = 82,020 bytes over 10 steps x 1024: ceil(8.01) intervals.
    assert (layout.world_size, layout.steps_per_interval, layout.intervals_per_record) == (8192, 10, 9)
    assert layout.node_names == ("alpha",)
