"""Real msrun jobs on CPU with real mccl collectives, launched through scripts/msrun_launch.sh."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import (
    HELPERS,
    MFTB,
    REPO,
    TINY_CONFIG,
    mf_losses,
    read_scalars,
    resumable_callbacks,
    run_dirs,
    run_mindformer_script,
    subprocess_env,
)
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from mindformers_tbplugin.registration.exit_status import STOPPED_BY_ALERT
from mindformers_tbplugin.viewer.tensorboard_server import any_free_port

pytestmark = pytest.mark.process

LAUNCH = REPO / "scripts" / "msrun_launch.sh"
DP2_CONFIG = REPO / "configs" / "tiny" / "llama_tiny_cpu_dp2.yaml"
COLLECTIVES_LINE = re.compile(
    r"TensorBoardMonitor: (\d+) aggregation interval\(s\), (\d+) collective\(s\) in all; "
    r"all-reduce per interval: (\d+) bytes, ([0-9.]+) ms"
)


def _config(folder: Path, data: Path, num_samples: int, aggregate_every: int, data_parallel: int, extra_metric: str):
    config = yaml.safe_load(DP2_CONFIG.read_text())
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(data)
    config["train_dataset"]["data_loader"]["num_samples"] = num_samples
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["parallel_config"]["data_parallel"] = data_parallel
    config["callbacks"] = [
        {"type": "MFLossMonitor"},
        {"type": "SlowRank", "auto_register": "rank_hooks.SlowRank"},
        {"type": "FailRank", "auto_register": "rank_hooks.FailRank"},
        {
            "type": "TensorBoardMonitor",
            "experiment": "dp",
            "aggregate_every": aggregate_every,
            "aggregate_seconds": 0,  # intervals of exactly aggregate_every steps, which these tests count
            "extra_metrics": [f"rank_hooks:{extra_metric}"],
        },
    ]
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _launch(config: Path, output: Path, *args: str, netns: str | None = None, **env: str) -> subprocess.Popen[str]:
    environment = subprocess_env(REGISTER_PATH=str(HELPERS), PYTHONPATH=str(HELPERS), **env)
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.Popen(
        [*prefix, "bash", str(LAUNCH), "--config", str(config), "--output_dir", str(output), *args],
        cwd=output.parent,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@dataclass
class Job:
    output: Path
    stdout: str
    stderr: str
    returncode: int

    @property
    def run_dir(self) -> Path:
        (only,) = run_dirs(self.output / "tensorboard")
        return only

    def worker_log(self, node: int, rank: int) -> str:
        return (self.output / "msrun_log" / str(node) / f"worker_{rank}.log").read_text(errors="replace")


def _finish(process: subprocess.Popen[str], output: Path, timeout: int = 900) -> Job:
    stdout, stderr = process.communicate(timeout=timeout)
    return Job(output, stdout, stderr, process.returncode)


@pytest.fixture(scope="module")
def dp2_job(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> Job:
    """2 ranks, 12 steps each (24 samples per shard), aggregate_every 4, one custom data metric; rank 1 is made slow."""
    folder = tmp_path_factory.mktemp("dp2")
    config = _config(
        folder, tiny_data, num_samples=24, aggregate_every=4, data_parallel=2, extra_metric="one_data_metric"
    )
    process = _launch(
        config, folder / "out", "--worker_num", "2", "--master_port", str(any_free_port()), MFTB_TEST_SLOW_RANK="1"
    )
    job = _finish(process, folder / "out")
    assert job.returncode == 0, job.stderr[-3000:] + job.worker_log(0, 0)[-3000:]
    return job


@pytest.fixture(scope="module")
def second_host() -> Iterator[tuple[str, str, str]]:
    """A second host on this machine: a network namespace joined to this one by a veth pair.

    msrun starts a scheduler on every node whose own address is --master_addr, so two nodes that
    both use 127.0.0.1 would both start one; the namespace gives node 1 an address of its own.
    Yields (namespace, master address, node 1 address)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("creating a network namespace needs root and iproute2 (CI runs as root)")
    suffix = os.getpid() % 200 + 20
    namespace, host_if, peer_if = f"mftb-node1-{os.getpid()}", f"mftbh{suffix}", f"mftbp{suffix}"
    master, peer = f"10.231.{suffix}.1", f"10.231.{suffix}.2"
    commands = [
        ["ip", "netns", "add", namespace],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", peer_if],
        ["ip", "link", "set", peer_if, "netns", namespace],
        ["ip", "addr", "add", f"{master}/24", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "netns", "exec", namespace, "ip", "addr", "add", f"{peer}/24", "dev", peer_if],
        ["ip", "netns", "exec", namespace, "ip", "link", "set", peer_if, "up"],
        ["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True)
        yield namespace, master, peer
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


@pytest.fixture(scope="module")
def two_node_job(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path, second_host: tuple[str, str, str]) -> Job:
    """Two nodes (this host and a network namespace) x 2 ranks, 20 custom data metrics."""
    namespace, master, _ = second_host
    folder = tmp_path_factory.mktemp("nodes")
    config = _config(
        folder, tiny_data, num_samples=8, aggregate_every=2, data_parallel=4, extra_metric="twenty_data_metrics"
    )
    common = ["--worker_num", "4", "--local_worker_num", "2", "--master_addr", master, "--master_port", "8390"]
    nodes = [
        _launch(config, folder / "out", *common, "--node_rank", "0"),
        _launch(config, folder / "out", *common, "--node_rank", "1", netns=namespace),
    ]
    jobs = [_finish(process, folder / "out") for process in nodes]
    for job in jobs:
        assert job.returncode == 0, job.stderr[-3000:]
    return jobs[0]


def test_exactly_one_process_writes_the_main_run(dp2_job: Job) -> None:
    files = [p for p in dp2_job.run_dir.iterdir() if p.is_file()]
    assert len(files) == 1 and "tfevents" in files[0].name
    assert sorted(p.name for p in dp2_job.run_dir.iterdir() if p.is_dir()) == ["rank_0", "rank_1"]
    assert "rank 0 writes the main run" in dp2_job.worker_log(0, 0)


@pytest.mark.compat
def test_main_loss_is_the_mean_of_the_ranks_losses(dp2_job: Job) -> None:
    printed = [mf_losses(dp2_job.worker_log(0, rank)) for rank in (0, 1)]
    main = read_scalars(dp2_job.run_dir)
    losses = dict(main["train/loss"])
    assert sorted(losses) == list(range(1, 13))
    for step, value in losses.items():
        expected = (printed[0][step][0] + printed[1][step][0]) / 2
        assert abs(value - expected) <= 1e-5, (step, value, expected)
    assert printed[0][5][0] != printed[1][5][0]  # the ranks really saw different data
    assert all(value == 0.5 for _, value in main["custom/d0"])  # mean of rank ids 0 and 1
    # The highest rank loss of each step, and whose it was (carried in the same all-reduce).
    highest, ranks = dict(main["train/loss_max"]), dict(main["train/loss_max_rank"])
    assert sorted(highest) == sorted(ranks) == list(range(1, 13))
    for step, value in highest.items():
        expected_rank = max((0, 1), key=lambda rank: printed[rank][step][0])
        assert abs(value - printed[expected_rank][step][0]) <= 1e-5, (step, value, printed[0][step], printed[1][step])
        assert ranks[step] == expected_rank, step


def test_the_workers_printed_logs_import_as_a_sub_run_per_rank(dp2_job: Job) -> None:
    """msrun's worker logs as `mftb import out/msrun_log` reads them: one sub-run per rank, whose losses
    average to the main run's data-parallel mean loss, and whose grad norm is the main run's."""
    from mindformers_tbplugin.imports import detect

    imported = detect.read_source([dp2_job.output / "msrun_log"])
    assert sorted(imported.sub_runs) == ["rank_0", "rank_1"] and imported.skipped == []
    ranks = [imported.sub_runs[f"rank_{rank}"] for rank in (0, 1)]
    assert {rank.format for rank in ranks} == {"mindformers-log"}
    resolution = ranks[0].resolution["train/loss"]
    main = dict(read_scalars(dp2_job.run_dir)["train/loss"])
    assert sorted(ranks[0].scalars["train/loss"]) == sorted(main) == list(range(1, 13))
    for step, value in main.items():
        mean = (ranks[0].scalars["train/loss"][step] + ranks[1].scalars["train/loss"][step]) / 2
        assert abs(mean - value) <= resolution / 2 + abs(value) * 2**-24, (step, mean, value)
    for step, value in read_scalars(dp2_job.run_dir)["train/grad_norm"]:  # the same on every rank
        for rank in ranks:
            allowed = rank.resolution["train/grad_norm"] / 2 + abs(value) * 2**-24
            assert abs(rank.scalars["train/grad_norm"][step] - value) <= allowed, (step, value)


def test_rank_runs_hold_each_ranks_system_metrics(dp2_job: Job) -> None:
    for rank in (0, 1):
        scalars = read_scalars(dp2_job.run_dir / f"rank_{rank}")
        # With the FLOPs estimate of a legacy model (no MFU: a CPU has no known peak).
        assert set(scalars) == {
            "perf/step_time_ms",
            "perf/samples_per_s",
            "perf/tokens_per_s",
            "perf/model_tflops_per_device",
            "system/host_rss_gb",
        }
        assert [s for s, _ in scalars["perf/step_time_ms"]] == list(range(1, 13))


def test_job_throughput_is_the_sum_of_the_data_parallel_ranks(dp2_job: Job) -> None:
    main = read_scalars(dp2_job.run_dir)
    own = [dict(read_scalars(dp2_job.run_dir / f"rank_{rank}")["perf/tokens_per_s"]) for rank in (0, 1)]
    # perf/tokens_per_s keeps its meaning: the writing rank's own value at every step, the job's 4
    # samples per step over its own step time.
    assert main["perf/tokens_per_s"] == sorted(own[0].items())
    # Per interval (steps 1-4, 5-8, 9-12) each rank's replica reads 2 of the 4 samples: its share of
    # the job's tokens over its time is half its own rate over the interval (tokens over time).
    for tag in ("perf/job_tokens_per_s", "perf/job_samples_per_s"):
        assert [s for s, _ in main[tag]] == [4, 8, 12], tag
    for step, job in main["perf/job_tokens_per_s"]:
        interval = range(step - 3, step + 1)
        replicas = [len(interval) / sum(1 / rates[s] for s in interval) / 2 for rates in own]
        assert abs(job - sum(replicas)) <= 1e-5 * job, (step, job, replicas)
    for (step, tokens), (_, samples) in zip(main["perf/job_tokens_per_s"], main["perf/job_samples_per_s"], strict=True):
        assert abs(tokens - 32 * samples) <= 1e-5 * tokens, step  # seq_length 32


def _interval_means(run_dir: Path, tag: str, steps: list[int], every: int) -> list[list[float]]:
    """Each rank's mean of ``tag`` over the interval ending at each of ``steps``, from its own rank run."""
    own = [dict(read_scalars(run_dir / f"rank_{rank}")[tag]) for rank in (0, 1)]
    return [[sum(series[s] for s in range(step - every + 1, step + 1)) / every for series in own] for step in steps]


def test_cross_rank_step_time_summary_is_the_ranks_own_interval_means(dp2_job: Job) -> None:
    """ranks/step_time_ms_{max,min,mean,argmax} at each aggregation against each rank's own step times over
    the interval, as its rank run holds them."""
    main = {tag: dict(points) for tag, points in read_scalars(dp2_job.run_dir).items()}
    steps = [4, 8, 12]
    for name in ("max", "min", "mean", "argmax"):
        assert sorted(main[f"ranks/step_time_ms_{name}"]) == steps, name
    for step, means in zip(steps, _interval_means(dp2_job.run_dir, "perf/step_time_ms", steps, 4), strict=True):
        assert main["ranks/step_time_ms_max"][step] == pytest.approx(max(means), rel=1e-5), (step, means)
        assert main["ranks/step_time_ms_min"][step] == pytest.approx(min(means), rel=1e-5), (step, means)
        assert main["ranks/step_time_ms_mean"][step] == pytest.approx(sum(means) / 2, rel=1e-5), (step, means)
        assert main["ranks/step_time_ms_argmax"][step] == means.index(max(means)), (step, means)
        # rank 1 sleeps 150 ms in each step before the monitor's step end: every one of its steps holds it
        assert means[1] > 150, (step, means)
    assert "ranks/slowest_1_rank" not in main  # per-rank runs are on at this size


def test_four_ranks_on_two_nodes_route_logs_per_node_and_rank(two_node_job: Job) -> None:
    output = two_node_job.output
    assert sorted(str(p.relative_to(output / "msrun_log")) for p in (output / "msrun_log").glob("*/worker_*.log")) == [
        "0/worker_0.log",
        "0/worker_1.log",
        "1/worker_2.log",
        "1/worker_3.log",
    ]
    run_dir = two_node_job.run_dir
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["rank_0", "rank_1", "rank_2", "rank_3"]
    assert len([p for p in run_dir.iterdir() if p.is_file()]) == 1
    printed = [mf_losses(two_node_job.worker_log(rank // 2, rank)) for rank in range(4)]
    main = read_scalars(run_dir)
    for step, value in main["train/loss"]:
        expected = sum(p[step][0] for p in printed) / 4
        assert abs(value - expected) <= 1e-5, (step, value, expected)
    # The straggler's node at each aggregation (ranks 0, 1 on node 0; 2, 3 on node 1), and the count of
    # nodes that were slow as a whole.
    stragglers, nodes = dict(main["ranks/step_time_ms_argmax"]), dict(main["ranks/step_time_ms_argmax_node"])
    assert sorted(nodes) == sorted(stragglers) == [2, 4] and sorted(main["ranks/slow_nodes"])[0][0] == 2
    assert all(nodes[step] == stragglers[step] // 2 for step in nodes), (stragglers, nodes)
    # The two nodes share this machine's host name (a network namespace keeps it): told apart by index.
    from tensorboard.backend.event_processing.event_accumulator import TENSORS

    from mindformers_tbplugin.pipeline.rank_records import RankLayout

    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    layout = RankLayout.from_content(accumulator.SummaryMetadata("ranks/matrix").plugin_data.content)
    host = socket.gethostname()
    assert (layout.nodes, layout.node_names) == ((0, 0, 1, 1), (f"{host} (node 0)", f"{host} (node 1)"))


def test_collectives_per_interval_do_not_grow_with_the_number_of_metrics(dp2_job: Job, two_node_job: Job) -> None:
    counts, payloads = [], []
    for job in (dp2_job, two_node_job):
        intervals, collectives, payload, _ = COLLECTIVES_LINE.search(job.worker_log(0, 0)).groups()
        counts.append((int(collectives) - 1) / int(intervals))  # minus the one at start that names the run folder
        payloads.append(int(payload))
    assert counts == [1.0, 1.0]  # 1 data metric + loss, and 20 data metrics + loss
    # The vector as docs/multi-rank.md spells it: 33 + 2 x aggregate_every x 32 floats for the data metrics,
    # 4 per rank (system), aggregate_every + 1 per rank (losses), 4 (job throughput), 1 (the next interval's
    # length), 1 (job stop).
    expected = [4 * (33 + 2 * every * 32 + 4 * world + (every + 1) * world + 6) for every, world in ((4, 2), (2, 4))]
    assert payloads == expected == [1252, 780]
    assert len(read_scalars(two_node_job.run_dir)) > len(read_scalars(dp2_job.run_dir)) + 15


def test_a_bad_config_is_reported_before_any_rank_starts(tmp_path: Path) -> None:
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["callbacks"] = [{"type": "TensorBoardMonitor", "log_every": 0}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    process = _launch(path, tmp_path / "out", "--worker_num", "2")
    job = _finish(process, tmp_path / "out", timeout=120)
    assert job.returncode == 2
    assert "callbacks[0].log_every" in job.stdout + job.stderr
    assert "no rank was started" in job.stderr
    assert not (tmp_path / "out" / "msrun_log").exists()


def test_mftb_launch_runs_the_same_launcher(tmp_path: Path) -> None:
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["callbacks"] = [{"type": "TensorBoardMonitor", "flush_secs": 0}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [MFTB, "launch", "--config", str(path), "--worker_num", "2", "--output_dir", str(tmp_path / "out")],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "callbacks[0].flush_secs" in result.stdout + result.stderr
    assert "no rank was started" in result.stderr


def test_a_crashing_rank_fails_the_launch_and_is_named(tmp_path: Path, tiny_data: Path) -> None:
    config = _config(
        tmp_path, tiny_data, num_samples=24, aggregate_every=4, data_parallel=2, extra_metric="one_data_metric"
    )
    process = _launch(
        config, tmp_path / "out", "--worker_num", "2", "--master_port", str(any_free_port()), MFTB_TEST_FAIL_RANK="1"
    )
    job = _finish(process, tmp_path / "out")
    assert job.returncode != 0
    assert "msrun_launch: rank 1 failed" in job.stderr
    assert "rank 1 failed on purpose" in job.stderr


RESUME_STEPS = 20


def _kill_job(launcher: subprocess.Popen[str], config: Path) -> None:
    """SIGKILL every process of a job, as a node failure would: the launcher's session, and msrun's
    workers, which are not in it but have the config path on their command line."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(launcher.pid, signal.SIGKILL)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if str(config).encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)


def _scalar_points(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, wall time) of a tag's points as TensorBoard shows them (restart purges applied)."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
    accumulator.Reload()
    return [(e.step, e.wall_time) for e in accumulator.Scalars(tag)] if tag in accumulator.Tags()["scalars"] else []


def test_a_killed_msrun_job_resumes_into_the_same_runs(tmp_path: Path, tiny_data: Path) -> None:
    """Every rank of a resumed job continues the run of the killed one, and TensorBoard shows each
    series once, the resumed attempt's points after the checkpoint."""
    config = yaml.safe_load(DP2_CONFIG.read_text())
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(tiny_data)
    config["train_dataset"]["data_loader"]["num_samples"] = 2 * RESUME_STEPS
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["callbacks"] = resumable_callbacks({"type": "TensorBoardMonitor", "experiment": "dpres", "flush_secs": 0.2})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    output = tmp_path / "out"
    # MindFormers' multi-rank checkpoint loading calls Barrier, which has no CPU kernel: this entry
    # puts an all-reduce in its place (see the helper). Both attempts use it.
    entry = ("--entry", str(HELPERS / "train_with_cpu_barrier.py"))
    slow = {"MFTB_TEST_SLOW_RANK": "0", "MFTB_TEST_SLOW_SECONDS": "0.4"}

    first = _launch(path, output, "--worker_num", "2", "--master_port", str(any_free_port()), *entry, **slow)
    deadline = time.monotonic() + 300
    while first.poll() is None and time.monotonic() < deadline:
        runs = run_dirs(output / "tensorboard")
        # Checkpoints at 8 and 16; the loss is written when an interval (10 steps) is averaged.
        if runs and max((step for step, _ in _scalar_points(runs[0], "train/loss")), default=0) >= 10:
            _kill_job(first, path)
            break
        time.sleep(0.2)
    first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL, "the first attempt ended before it could be killed"
    checkpoint_steps = {
        json.loads((output / "checkpoint" / f"rank_{rank}" / "meta.json").read_text())["last_step"] for rank in (0, 1)
    }
    assert checkpoint_steps == {8}

    resume_started = time.time()
    resume = ("--resume_training", "True", "--load_checkpoint", str(output / "checkpoint"))
    second = _launch(
        path, output, "--worker_num", "2", "--master_port", str(any_free_port()), *entry, "--", *resume, **slow
    )
    job = _finish(second, output)
    assert job.returncode == 0, job.stderr[-3000:] + job.worker_log(0, 0)[-3000:]

    (run,) = run_dirs(output / "tensorboard")  # the killed job's run, continued
    for run_dir, tag in [
        (run, "train/loss"),
        (run / "rank_0", "perf/step_time_ms"),
        (run / "rank_1", "perf/step_time_ms"),
    ]:
        assert len(list(run_dir.glob("*tfevents*"))) == 2, run_dir  # one file per attempt
        points = _scalar_points(run_dir, tag)
        assert [step for step, _ in points] == list(range(1, RESUME_STEPS + 1)), (run_dir, tag)
        assert all(wall < resume_started for step, wall in points if step <= 8), (run_dir, tag)
        assert all(wall >= resume_started for step, wall in points if step > 8), (run_dir, tag)
    assert [(step, value) for step, value in read_scalars(run)["meta/restart"]] == [(9, 8.0)]


def _small_job(
    tmp_path: Path,
    tiny_data: Path,
    steps: int = 8,
    more_callbacks: tuple[dict, ...] = (),
    status: int = 0,
    runner_wrapper: dict | None = None,
    entry: Path | None = None,
    **monitor_options: object,
) -> Job:
    """2 ranks, aggregate_every 4, rank 1 slowed; TensorBoardMonitor options (and ``runner_wrapper``
    entries) changed; the launcher runs ``entry`` (mftb train by default) and exits ``status``."""
    path = _config(
        tmp_path, tiny_data, num_samples=2 * steps, aggregate_every=4, data_parallel=2, extra_metric="one_data_metric"
    )
    config = yaml.safe_load(path.read_text())
    config["callbacks"][-1].update(monitor_options)
    config["runner_wrapper"].update(runner_wrapper or {})
    config["callbacks"] += list(more_callbacks)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    launch = ("--worker_num", "2", "--master_port", str(any_free_port()), *(("--entry", str(entry)) if entry else ()))
    job = _finish(_launch(path, tmp_path / "out", *launch, MFTB_TEST_SLOW_RANK="1"), tmp_path / "out")
    assert job.returncode == status, job.stderr[-3000:] + job.worker_log(0, 0)[-3000:]
    return job


def test_without_log_dir_the_runs_go_beside_the_rank_logs_and_the_launcher_says_so(dp2_job: Job) -> None:
    folder = dp2_job.output / "tensorboard"
    assert dp2_job.run_dir.parent == folder
    said = [line for line in dp2_job.stdout.splitlines() if line.startswith("msrun_launch: ")]
    assert said[0].endswith(f", TensorBoard runs in {folder}")
    assert said[-1] == f"msrun_launch: done; TensorBoard runs in {folder}"


def test_without_per_rank_runs_the_main_run_names_the_slowest_ranks(tmp_path: Path, tiny_data: Path) -> None:
    """ranks/slowest_<n>_rank and _step_time_ms at each aggregation against the ranks' step times of the
    interval in the ranks/matrix record written at the same step."""
    job = _small_job(tmp_path, tiny_data, per_rank_limit=1, topk_ranks=2)  # world size 2 > limit: "auto" is off
    assert not [p for p in job.run_dir.iterdir() if p.is_dir()]
    main = {tag: dict(points) for tag, points in read_scalars(job.run_dir).items()}
    records = _rank_records(job.run_dir)
    assert sorted(main["ranks/slowest_1_rank"]) == sorted(records) == [4, 8]
    for step, record in records.items():
        times = record[:, 0].astype(np.float64)
        order = [int(rank) for rank in np.argsort(-times)]
        assert [main[f"ranks/slowest_{place}_rank"][step] for place in (1, 2)] == order, (step, times)
        for place, rank in enumerate(order, start=1):
            assert main[f"ranks/slowest_{place}_step_time_ms"][step] == pytest.approx(times[rank], rel=1e-3)
        assert times[1] > 150  # rank 1's 150 ms sleep is in each of its steps


def _rank_records(run_dir: Path) -> dict[int, np.ndarray]:
    """The ranks/matrix records of a run through TensorBoard's reader: {step: (world, channels)}."""
    from tensorboard.backend.event_processing.event_accumulator import TENSORS
    from tensorboard.util import tensor_util

    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    return {event.step: tensor_util.make_ndarray(event.tensor_proto) for event in accumulator.Tensors("ranks/matrix")}


def test_rank_policy_all_gives_every_rank_its_own_values_in_the_yamls_log_dir(tmp_path: Path, tiny_data: Path) -> None:
    """Every rank's own values in its rank run; and a log_dir written in the YAML wins over the launcher's
    folder (<output_dir>/tensorboard), which the launcher says."""
    chosen = tmp_path / "shared" / "tb"
    job = _small_job(tmp_path, tiny_data, rank_policy="all", per_rank_system=False, log_dir=str(chosen))
    (run_dir,) = run_dirs(chosen)
    assert not (job.output / "tensorboard").exists()
    assert f"TensorBoard runs in {chosen}" in job.stdout
    assert f"msrun_launch: done; TensorBoard runs in {chosen}" in job.stdout
    for rank in (0, 1):
        own = read_scalars(run_dir / f"rank_{rank}")
        printed = mf_losses(job.worker_log(0, rank))
        # This rank's own loss at every step, unaveraged, with the model and system tags.
        losses = dict(own["train/loss"])
        assert sorted(losses) == list(range(1, 9))
        assert all(abs(value - printed[step][0]) <= 1e-5 for step, value in losses.items()), (losses, printed)
        assert {"train/lr", "perf/step_time_ms", "custom/d0"} <= set(own)
        assert {v for _, v in own["custom/d0"]} == {float(rank)}
    main = read_scalars(run_dir)
    assert [step for step, _ in main["train/loss"]] == list(range(1, 9))
    assert {v for _, v in main["custom/d0"]} == {0.5}  # the main run still averages


# Layer 1's attention output projection gets 100x its gradient, the model's function unchanged
# (tests/helpers/layer_norm_hooks.py).
EXPLODING = {"model.layers.1.attention.wv.weight": 100.0, "model.layers.1.attention.wo.weight": 0.01}
GRAD_GROUPS = ("embedding", "layers.0", "layers.1", "final_norm", "head")


def test_per_layer_gradient_norms_are_the_root_mean_square_of_the_ranks_own(tmp_path: Path, tiny_data: Path) -> None:
    """With local_norm each rank's wrapper returns its local (pre-reduction) gradient norms; the main
    run's grad_norm/<group> is sqrt of the mean over ranks of their squares, at every logged step
    (10 steps: two full intervals of 4 and the 2 steps aggregated at the end). Layer 1's gradient
    explodes at step 6: the alert on train/grad_norm (written at once) waits for step 6's group norms
    (written at the aggregation of step 8) and names layer 1."""
    wrapper = {"local_norm": True, "use_clip_grad": True}
    alerts = tmp_path / "alerts.jsonl"
    explode = {"type": "ExplodeLayer", "auto_register": "layer_norm_hooks.ExplodeLayer", "step": 6, "scales": EXPLODING}
    rule = {"rule": "spike", "tag": "train/grad_norm", "k": 20, "window": 4, "min_points": 4}
    alert_monitor = {"type": "AlertMonitor", "rules": [rule], "sinks": [{"jsonl": str(alerts)}]}
    job = _small_job(
        tmp_path,
        tiny_data,
        steps=10,
        more_callbacks=(alert_monitor, explode),
        runner_wrapper=wrapper,
        rank_policy="all",
        log_every=1,
    )
    first = json.loads(alerts.read_text().splitlines()[0])
    assert (first["tag"], first["step"]) == ("train/grad_norm", 6)
    assert "against their recent median: layers.1 " in first["message"], first["message"]
    tags = [f"grad_norm/{group}" for group in GRAD_GROUPS]
    steps = list(range(1, 11))
    main = read_scalars(job.run_dir)
    own = [read_scalars(job.run_dir / f"rank_{rank}") for rank in (0, 1)]
    for tag in [*tags, "grad_norm/total"]:
        assert [s for s, _ in main[tag]] == steps, tag  # exactly one point per logged step
        for rank in (0, 1):
            assert [s for s, _ in own[rank][tag]] == steps, (rank, tag)
    for tag in tags:
        written, first, second = dict(main[tag]), dict(own[0][tag]), dict(own[1][tag])
        for step in steps:
            expected = math.sqrt((first[step] ** 2 + second[step] ** 2) / 2)
            assert math.isclose(written[step], expected, rel_tol=1e-4), (tag, step, written[step], expected)
    for step, total in main["grad_norm/total"]:
        groups = sum(dict(main[tag])[step] ** 2 for tag in tags)
        assert math.isclose(total**2, groups, rel_tol=1e-4), (step, total**2, groups)
    # The ranks read different batches (full_batch False), so their local norms differ: the
    # combination above is not a rank's own value written twice.
    totals = [dict(own[rank]["grad_norm/total"]) for rank in (0, 1)]
    for step in steps:
        assert abs(totals[0][step] - totals[1][step]) > 1e-3 * totals[0][step], (step, totals)


@pytest.mark.parametrize("entry", [None, "run_mindformer.py"], ids=["mftb train", "run_mindformer.py"])
def test_an_alert_stop_stops_every_rank_at_the_same_step(tmp_path: Path, tiny_data: Path, entry: str | None) -> None:
    """The writer rank's alert fires on the first averaged loss (step 1's, written at the aggregation
    of step 4); the request rides in the next aggregation (step 8), after which every rank stops: no
    rank is left waiting. MindFormers' own run_mindformer.py exits with the same status as mftb train."""
    rule = {"rule": "threshold", "tag": "train/loss", "above": 0.0, "action": "stop"}
    jsonl = tmp_path / "alerts.jsonl"
    alert_monitor = {"type": "AlertMonitor", "rules": [rule], "sinks": ["log", "tensorboard", {"jsonl": str(jsonl)}]}
    script = run_mindformer_script() if entry else None
    job = _small_job(
        tmp_path, tiny_data, steps=16, more_callbacks=(alert_monitor,), status=STOPPED_BY_ALERT, entry=script
    )
    assert [max(mf_losses(job.worker_log(0, rank))) for rank in (0, 1)] == [8, 8]
    assert (
        "AlertMonitor: threshold: train/loss at step 1; every rank stops after the next cross-rank aggregation"
        in job.worker_log(0, 0)
    )
    for rank in (0, 1):
        assert "a rank asked the job to stop; every rank stops after step 8" in job.worker_log(0, rank)
    assert [s for s, _ in read_scalars(job.run_dir)["train/loss"]] == list(range(1, 9))
    # Every rank returns mftb train's alert status; only the writing rank knows the rule.
    writer_says = "stopped by AlertMonitor (threshold on train/loss at step 1) at step 8"
    said = {
        rank: f"{entry or 'mftb train'}: {why}; exit status 3"
        for rank, why in enumerate([writer_says, "stopped by AlertMonitor (an alert on rank 0) at step 8"])
    }
    for rank, line in said.items():
        assert line in job.worker_log(0, rank).splitlines(), job.worker_log(0, rank)[-3000:]
    assert f"ALERT [warning] threshold run={job.run_dir.name} tag=train/loss step=1" in job.worker_log(0, 0)
    log = job.output / "msrun_log" / "0" / "worker_0.log"
    launcher = (
        f"msrun_launch: the job was {writer_says} (rank 0's log: {log}); TensorBoard runs in {job.run_dir.parent}"
    )
    assert launcher in job.stderr.splitlines(), job.stderr[-3000:]
    assert "msrun_launch: rank" not in job.stderr  # no rank reported as failed
    accumulator = EventAccumulator(str(job.run_dir))
    accumulator.Reload()
    (status,) = accumulator.Tensors("meta/status")
    assert status.tensor_proto.string_val[0].decode() == writer_says
    # The incident names both ranks by their loss at step 1, highest first, as their logs printed it.
    (record,) = [json.loads(line) for line in jsonl.read_text().splitlines()]
    printed = {rank: mf_losses(job.worker_log(0, rank))[1] for rank in (0, 1)}
    ranks = record["incident"]["ranks"]
    assert [entry["rank"] for entry in ranks] == sorted(printed, key=lambda rank: -printed[rank][0])
    for entry in ranks:
        assert abs(entry["value"] - printed[entry["rank"]][0]) <= 1e-5, (ranks, printed)
    assert record["incident"]["lr"] == pytest.approx(printed[0][1], rel=1e-4)


def test_without_aggregation_an_alert_stop_is_refused_rather_than_stopping_one_rank(
    tmp_path: Path, tiny_data: Path
) -> None:
    rule = {"rule": "threshold", "tag": "local/train/loss", "above": 0.0, "action": "stop"}
    alert_monitor = {"type": "AlertMonitor", "rules": [rule]}
    job = _small_job(tmp_path, tiny_data, more_callbacks=(alert_monitor,), aggregate_every=0)
    assert [max(mf_losses(job.worker_log(0, rank))) for rank in (0, 1)] == [8, 8]  # nobody stopped, nobody hung
    assert job.worker_log(0, 0).count("AlertMonitor: action stop not carried out") == 1


def test_the_writer_records_every_ranks_step_time_and_memory_for_the_ranks_plugin(
    tmp_path: Path, tiny_data: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import TENSORS
    from tensorboard.util import tensor_util

    from mindformers_tbplugin.pipeline.rank_records import CHANNELS, PLUGIN_NAME, TAG, RankLayout

    (tmp_path / "on").mkdir(), (tmp_path / "off").mkdir()
    job = _small_job(tmp_path / "on", tiny_data, steps=8)  # aggregations at 4 and 8; rank 1 slowed
    accumulator = EventAccumulator(str(job.run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    plugins = {tag: accumulator.SummaryMetadata(tag).plugin_data.plugin_name for tag in accumulator.Tags()[TENSORS]}
    assert [tag for tag, plugin in plugins.items() if plugin == PLUGIN_NAME] == [TAG]
    metadata = accumulator.SummaryMetadata(TAG).plugin_data
    records = [(event.step, tensor_util.make_ndarray(event.tensor_proto)) for event in accumulator.Tensors(TAG)]
    assert [step for step, _ in records] == [4, 8]
    for step, record in records:
        assert record.shape == (2, len(CHANNELS)), step
        assert record[1, 0] > 150, (step, record)  # rank 1's 150 ms sleep is in each of its steps
    # Each rank's mean step time and host memory over the interval, as its own rank run holds them.
    steps = [step for step, _ in records]
    for index, tag in enumerate(("perf/step_time_ms", "system/host_rss_gb")):
        for (step, record), means in zip(records, _interval_means(job.run_dir, tag, steps, 4), strict=True):
            np.testing.assert_allclose(record[:, index].astype(np.float64), means, rtol=2e-3, err_msg=f"{tag} {step}")
    # Each rank's mean loss over the interval, as its worker log printed it.
    printed = [mf_losses(job.worker_log(0, rank)) for rank in (0, 1)]
    loss = CHANNELS.index("loss")
    for step, record in records:
        for rank in (0, 1):
            mean = sum(printed[rank][s][0] for s in range(step - 3, step + 1)) / 4
            assert abs(float(record[rank, loss]) - mean) <= 2e-3 * mean, (step, rank, record, mean)
    layout = RankLayout.from_content(metadata.content)
    assert (layout.world_size, layout.steps_per_interval, layout.intervals_per_record) == (2, 4, 1)
    assert layout.nodes == (0, 0) and layout.node_names == (socket.gethostname(),)
    assert layout.worker_log.format(node=0, rank=1) == str(job.output / "msrun_log" / "0" / "worker_1.log")
    # Nothing else the monitor writes changes.
    plain = _small_job(tmp_path / "off", tiny_data, steps=8, rank_records=False)
    off = EventAccumulator(str(plain.run_dir), size_guidance={TENSORS: 0})
    off.Reload()
    assert {tag: off.SummaryMetadata(tag).plugin_data.plugin_name for tag in off.Tags()[TENSORS]} == {
        tag: plugin for tag, plugin in plugins.items() if tag != TAG
    }
    assert set(read_scalars(plain.run_dir)) == set(read_scalars(job.run_dir))


# -- an incident on a real job: a bad batch planted on one rank ------------------------------------------
BAD_STEP, BAD_RANK, JOB_STEPS = 12, 1, 16


def _rows_read_back(path: Path, shards: int, shard: int, step: int, batch: int = 2) -> list[int]:
    """The rows MindSpore's MindDataset gives ``shard`` at ``step`` (unshuffled, as MindFormers reads it),
    found with an index-holding stand-in of the same length: independent of the plugin's own reckoning."""
    import mindspore.dataset as ds
    from mindspore.mindrecord import FileWriter

    rows = JOB_STEPS * batch * shards
    writer = FileWriter(str(path), shard_num=1, overwrite=True)
    writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "indexed")
    writer.write_raw_data([{"input_ids": np.full(4, index, np.int32)} for index in range(rows)])
    writer.commit()
    dataset = ds.MindDataset(str(path), columns_list=["input_ids"], shuffle=False, num_shards=shards, shard_id=shard)
    batches = dataset.batch(batch, drop_remainder=True).create_dict_iterator(output_numpy=True)
    return [int(row[0]) for row in list(batches)[step - 1]["input_ids"]]


@dataclass
class Planted:
    job: Job
    config: Path
    alerts: Path
    planted: list[int]  # the rows BAD_RANK reads at BAD_STEP
    indexed: Path  # the index-holding stand-in of _rows_read_back


@pytest.fixture(scope="module")
def planted_job(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    """Every row is its own index followed by one token repeated (learnt within a few steps), except the two
    rows rank 1 reads at step 12, whose tokens after the index are random: its loss jumps there and the
    averaged loss spikes. A checkpoint every 4 steps; each rank records the rows of every batch it trained on."""
    from mindspore.mindrecord import FileWriter

    tmp_path = tmp_path_factory.mktemp("planted")
    indexed = tmp_path / "indexed.mindrecord"
    planted = _rows_read_back(indexed, 2, BAD_RANK, BAD_STEP)
    rows = np.full((JOB_STEPS * 2 * 2, 33), 7, np.int32)
    rows[planted] = np.random.default_rng(0).integers(0, 256, size=(len(planted), 33))
    rows[:, 0] = np.arange(len(rows))  # each row names itself in the batch the network is given
    data = tmp_path / "planted.mindrecord"
    writer = FileWriter(str(data), shard_num=1, overwrite=True)
    writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "planted")
    writer.write_raw_data([{"input_ids": row} for row in rows])
    writer.commit()
    config = yaml.safe_load(DP2_CONFIG.read_text())
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(data)
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["runner_wrapper"]["local_norm"] = True
    # A constant learning rate high enough that the repeated token is learnt long before the bad step.
    config["lr_schedule"] = {"type": "ConstantWarmUpLR", "learning_rate": 0.01, "warmup_steps": 0, "total_steps": -1}
    jsonl = tmp_path / "alerts.jsonl"
    spike = {"rule": "spike", "tag": "train/loss", "k": 6, "window": 5, "min_points": 5}  # the loss falls fast
    config["callbacks"] = [
        {"type": "MFLossMonitor"},
        {"type": "ReadRecorder", "auto_register": "data_hooks.ReadRecorder"},
        {"type": "TensorBoardMonitor", "experiment": "planted", "aggregate_every": 4},
        {"type": "AlertMonitor", "rules": [spike], "sinks": ["log", "tensorboard", {"jsonl": str(jsonl)}]},
        {"type": "CheckpointMonitor", "prefix": "tiny", "save_checkpoint_steps": 4},
    ]
    path = tmp_path / "planted.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    reads = str(tmp_path / "reads_rank_{rank}.jsonl")
    launch = ("--worker_num", "2", "--master_port", str(any_free_port()))
    job = _finish(_launch(path, tmp_path / "out", *launch, MFTB_TEST_READS=reads), tmp_path / "out")
    assert job.returncode == 0, job.stderr[-3000:] + job.worker_log(0, 0)[-3000:]
    return Planted(job, path, jsonl, planted, indexed)


def _reads(path: Path) -> tuple[int, dict[str, float], dict[int, list[int]]]:
    """A ReadRecorder file: the step training started after, the parameters' sums of squares then, and the
    rows of each step."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    (begin,) = [record for record in records if "begin" in record]
    rows = {record["step"]: record["rows"] for record in records if "step" in record}
    return begin["begin"], begin["squares"], rows


def test_a_bad_batch_on_one_rank_is_named_by_its_incident(planted_job: Planted) -> None:
    """The alert's incident names rank 1 first with its printed loss, the rows each rank read at the bad
    step (as MindDataset gives them, and as the batches held them), and the last checkpoint before it."""
    job, tmp_path, planted = planted_job.job, planted_job.config.parent, planted_job.planted
    printed = [mf_losses(job.worker_log(0, rank)) for rank in (0, 1)]
    assert printed[BAD_RANK][BAD_STEP][0] > printed[1 - BAD_RANK][BAD_STEP][0] + 1.0, printed  # the plant took
    jsonl = planted_job.alerts
    assert jsonl.exists(), " | ".join(" ".join(f"{printed[r][s][0]:.3f}" for s in sorted(printed[r])) for r in (0, 1))
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    (record,) = [r for r in records if r["step"] == BAD_STEP]
    incident = record["incident"]
    assert [entry["rank"] for entry in incident["ranks"]] == [BAD_RANK, 1 - BAD_RANK]
    for entry in incident["ranks"]:
        assert abs(entry["value"] - printed[entry["rank"]][BAD_STEP][0]) <= 1e-5, incident["ranks"]
    samples = {entry["rank"]: entry["indices"] for entry in incident["samples"]}
    other = _rows_read_back(tmp_path / "other.mindrecord", 2, 1 - BAD_RANK, BAD_STEP)
    assert samples == {BAD_RANK: planted, 1 - BAD_RANK: other}, (samples, planted, other)
    for rank in (0, 1):  # the rows the network was given at that step, from the batch itself
        assert _reads(tmp_path / f"reads_rank_{rank}.jsonl")[2][BAD_STEP] == samples[rank], rank
    # the three gradient groups that stood out most against their recent median, with the norms written
    main = {tag: dict(points) for tag, points in read_scalars(job.run_dir).items()}
    layers = incident["layers"]
    assert len(layers) == 3 and all(entry["times_median"] is not None for entry in layers), layers
    assert [entry["times_median"] for entry in layers] == sorted((e["times_median"] for e in layers), reverse=True)
    for entry in layers:
        assert entry["grad_norm"] == pytest.approx(main[f"grad_norm/{entry['group']}"][BAD_STEP], rel=1e-5), entry
    folder = job.output / "checkpoint"
    assert incident["checkpoint"] == {"step": 8, "path": str(folder / "rank_0" / "tiny_rank_0-1_8.ckpt")}
    assert incident["resume"] == [
        f"load_checkpoint: '{folder}'",
        "resume_training: 'tiny_rank_0-1_8.ckpt'",
        "ignore_data_skip: False",
        f"data_skip_steps: {BAD_STEP}",
    ]
    loss_max = dict(read_scalars(job.run_dir)["train/loss_max"])
    assert abs(loss_max[BAD_STEP] - printed[BAD_RANK][BAD_STEP][0]) <= 1e-5


def test_the_incidents_resume_lines_train_past_the_bad_batch_from_its_checkpoint(planted_job: Planted) -> None:
    """The incident's resume lines applied to the job's config as they are written, and the job launched
    again: every rank starts from its own checkpoint of step 8 (its parameters at train begin are that file's,
    not step 4's or 12's), trains on the batches after the bad one (the rows in the batches, against the
    rows MindDataset gives after step 12) to the end of its data, and the run continues with those steps."""
    from mindspore import load_checkpoint

    job, tmp_path = planted_job.job, planted_job.config.parent
    (record,) = [r for r in map(json.loads, planted_job.alerts.read_text().splitlines()) if r["step"] == BAD_STEP]
    config = yaml.safe_load(planted_job.config.read_text())
    config.update(yaml.safe_load("\n".join(record["incident"]["resume"])))
    path = tmp_path / "resume.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    validate = subprocess.run([MFTB, "validate", str(path)], capture_output=True, text=True)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    reads = str(tmp_path / "resumed_rank_{rank}.jsonl")
    # MindFormers' multi-rank checkpoint loading calls Barrier, which has no CPU kernel: this entry puts an
    # all-reduce in its place (see the helper); nothing else differs from `mftb train`.
    launch = ("--worker_num", "2", "--master_port", str(any_free_port()))
    launch += ("--entry", str(HELPERS / "train_with_cpu_barrier.py"))
    # A copy of the job's folder (its runs, checkpoints and logs stay as the other tests read them); the
    # resume lines name the first job's checkpoint folder, which the resumed job loads.
    output = tmp_path / "resumed"
    shutil.copytree(job.output, output, ignore=shutil.ignore_patterns("msrun_log"))
    resumed = _finish(_launch(path, output, *launch, MFTB_TEST_READS=reads), output)
    assert resumed.returncode == 0, resumed.stderr[-3000:] + resumed.worker_log(0, 0)[-3000:]

    checkpoints = job.output / "checkpoint"
    after = list(range(BAD_STEP + 1, JOB_STEPS + 1))  # the batches after the bad one, to the end of the data
    resumed_steps = list(range(9, 9 + len(after)))  # numbered on from the checkpoint's step
    for rank in (0, 1):
        begin, squares, rows = _reads(tmp_path / f"resumed_rank_{rank}.jsonl")
        assert begin == 8, rank
        for step, expected in ((8, True), (4, False), (12, False)):
            saved = load_checkpoint(str(checkpoints / f"rank_{rank}" / f"tiny_rank_{rank}-1_{step}.ckpt"))
            from_file = {name: float(np.sum(np.square(saved[name].asnumpy().astype(np.float64)))) for name in squares}
            assert (from_file == squares) is expected, (rank, step)
        assert sorted(rows) == resumed_steps, (rank, rows)
        read_back = [_rows_read_back(tmp_path / "indexed.mindrecord", 2, rank, batch) for batch in after]
        assert [rows[step] for step in resumed_steps] == read_back, (rank, rows, read_back)
        assert not set(planted_job.planted) & {row for step_rows in rows.values() for row in step_rows}
        printed = mf_losses(resumed.worker_log(0, rank))
        assert sorted(printed) == resumed_steps, (rank, printed)
    # TensorBoard shows the run once: the first attempt's steps up to the checkpoint, then the resumed ones
    # (the mean of the ranks' printed losses), the bad step's spike gone.
    (run_dir,) = run_dirs(output / "tensorboard")
    printed = [mf_losses(resumed.worker_log(0, rank)) for rank in (0, 1)]
    losses = read_scalars(run_dir)["train/loss"]
    assert [step for step, _ in losses] == list(range(1, resumed_steps[-1] + 1))
    for step, value in losses[8:]:
        assert abs(value - (printed[0][step][0] + printed[1][step][0]) / 2) <= 1e-5, (step, value)
    assert read_scalars(run_dir)["meta/restart"] == [(9, 8.0)]
    # the monitor knows where the resumed training ends (the data skip shortens its first epoch)
    said = [line for line in resumed.worker_log(0, 0).splitlines() if "never comes due" in line]
    assert said and all(f"training ends at step {resumed_steps[-1]} " in line for line in said), said
