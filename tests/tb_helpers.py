"""Test helpers: `mftb tensorboard` as a child process, headless Chromium driven through chromedriver, and
the dashboards' tensor records written as the monitor writes them and read back by their stores."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from conftest import MFTB, subprocess_env

from mindformers_tbplugin.pipeline import expert_records
from mindformers_tbplugin.pipeline.expert_load import EXPERT_BIAS
from mindformers_tbplugin.pipeline.expert_records import BIAS, LOAD, ExpertLayout
from mindformers_tbplugin.pipeline.rank_records import CHANNELS, PLUGIN_NAME, TAG, RankLayout
from mindformers_tbplugin.tfevents.events import tensor_event
from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import tensorboard_server
from mindformers_tbplugin.viewer.moe_store import MoeRun, MoeStore
from mindformers_tbplugin.viewer.ranks_store import RanksStore, RunRecords

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


@dataclass
class MftbTensorBoard:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None  # drains the output once ready: a full pipe would stall the server

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def port(self) -> int:
        (line,) = [line for line in self.lines if line.startswith("TensorBoard is ready:")]
        return int(line.split(":")[3].split("/")[0])

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """SIGTERM (a scheduler, `kill`) or SIGINT (Ctrl-C); returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self.reader is not None:
            self.reader.join(timeout=30)
        else:
            self.lines += self.process.stdout.readlines()
        return code

    def drain(self) -> None:
        """Keep reading the output into ``lines`` in the background (TensorBoard warns on stderr per request)."""
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self.reader.start()


@contextlib.contextmanager
def mftb_tensorboard(
    logdir: Path, *args: str, cwd: Path | None = None, timeout: float = 120.0, env: dict[str, str] | None = None
) -> Iterator[MftbTensorBoard]:
    """Run `mftb tensorboard LOGDIR ARGS` (``env``: variables to set) until it says it is ready; always
    stopped on exit."""
    process = subprocess.Popen(
        [MFTB, "tensorboard", str(logdir), *args],
        cwd=cwd,
        env=subprocess_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = MftbTensorBoard(process)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                raise AssertionError(f"mftb tensorboard ended before it was ready:\n{server.output}")
            server.lines.append(line)
            if line.startswith("TensorBoard is ready:"):
                break
        else:
            raise AssertionError(f"mftb tensorboard not ready within {timeout} s:\n{server.output}")
        server.drain()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def plain_tensorboard(logdir: Path, *extra: str) -> Iterator[int]:
    """The `tensorboard` program itself on a free loopback port (``extra`` flags win), for the doctor's checks."""
    port = tensorboard_server.free_port(16006)
    process = subprocess.Popen(
        [*tensorboard_server.tensorboard_argv(logdir, port), *extra],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert tensorboard_server.wait_until_serving(process, port), "tensorboard did not start"
        yield port
    finally:
        tensorboard_server.stop(process)


def served_json(port: int, path: str) -> object:
    """The JSON a TensorBoard on ``port`` answers at ``path``; None for an error status or no answer."""
    return tensorboard_server.get_json(port, path, timeout=10)


def plugin_enabled(port: int, plugin: str) -> bool | None:
    """Whether TensorBoard's plugin listing says ``plugin`` is active (None: not listed or no answer)."""
    listing = served_json(port, "/data/plugins_listing")
    return None if listing is None else listing.get(plugin, {}).get("enabled")


@contextlib.contextmanager
def tensorboard_before_records(logdir: Path, plugin: str) -> Iterator[int]:
    """A plain TensorBoard re-reading every second, on a logdir whose one run ("job") holds only scalars:
    ``plugin`` listed but inactive, its ``runs`` route empty."""
    writer = RunWriter(logdir / "job")
    writer.add_scalars(1, {"train/loss": 1.0})
    writer.close()
    with plain_tensorboard(logdir, "--reload_interval", "1") as port:
        assert wait_for(lambda: served_json(port, "/data/runs")) == ["job"]
        assert plugin_enabled(port, plugin) is False
        assert served_json(port, f"/data/plugin/{plugin}/runs") == []
        yield port


def assert_serves_its_module(port: int, plugin: str) -> None:
    """The plugin's ES module, as TensorBoard's plugin frame loads it, and nothing fetched from the network."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/{plugin}/index.js", timeout=10) as response:
        assert "javascript" in response.headers["Content-Type"]
        source = response.read().decode("utf-8")
    assert "export async function render()" in source and "://" not in source
    entry = urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin_entry.html?name={plugin}", timeout=10)
    assert "./index.js" in entry.read().decode("utf-8")


def wait_for(probe: Callable[[], object], timeout: float = 60.0) -> object:
    """The first truthy result of ``probe``, polled twice a second (TensorBoard loads runs in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            next(handle)
            for row in handle:
                local, state = row.split()[1], row.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(_address(address))
    return found


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ".".join(str(b) for b in reversed(raw))
    return "::" if not any(raw) else hex_address


# Text of the page including every shadow root (TensorBoard's dashboards are Polymer components).
DEEP_TEXT_JS = """
const parts = [];
const walk = (node) => {
  if (node.nodeType === Node.TEXT_NODE) { parts.push(node.textContent); return; }
  if (['STYLE', 'SCRIPT', 'NOSCRIPT', 'TEMPLATE'].includes(node.nodeName)) return;
  if (node.shadowRoot) walk(node.shadowRoot);
  for (const child of node.childNodes) walk(child);
};
walk(document.body);
return parts.join(' ').replace(/\\s+/g, ' ');
"""

# Number of drawn line paths inside the charts' shadow roots: charts are on screen when it is > 0.
DEEP_COUNT_JS = """
const selector = arguments[0];
let count = 0;
const walk = (root) => {
  count += root.querySelectorAll(selector).length;
  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) walk(el.shadowRoot);
};
walk(document);
return count;
"""


def open_chromium():
    """A headless Chromium session (selenium + Debian's chromedriver) with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='mftb-chromium-')}")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def write_tensor_records(
    run_dir: Path, arrays: np.ndarray, tag: str, plugin_name: str, layout: bytes, first_step: int, every: int
) -> None:
    """One writer's records of a plugin, as the monitor writes them: float16, the layout in the first one
    only, and a scalar beside them (a run holds other records too)."""
    writer = RunWriter(run_dir)
    for i, array in enumerate(arrays.astype(np.float16)):
        content = layout if i == 0 else b""
        writer.add_built(
            first_step + i * every, lambda s, w, a=array, c=content: tensor_event(s, w, tag, a, plugin_name, c)
        )
    writer.add_scalars(first_step, {"train/loss": 1.0})
    writer.close()


# -- the ranks dashboard's records of a synthetic job --------------------------------------------------
RANKS_PER_NODE = 8
WORKER_LOG = "/jobs/out/msrun_log/{node}/worker_{rank}.log"


def layout(world: int, worker_log: str | None = WORKER_LOG) -> RankLayout:
    nodes = tuple(rank // RANKS_PER_NODE for rank in range(world))
    names = tuple(f"host{n}" for n in range(-(-world // RANKS_PER_NODE)))
    return RankLayout(world, CHANNELS, 10, 1, nodes, names, worker_log)


def matrices(world: int, records: int, seed: int = 0) -> np.ndarray:
    """(records, world, channels): step times ~100 ms within 1%, memory rising with the rank, losses ~2."""
    rng = np.random.default_rng(seed)
    out = np.empty((records, world, len(CHANNELS)), np.float32)
    out[..., 0] = rng.uniform(99, 101, (records, world))
    out[..., 1] = 20 + np.arange(world) / world
    out[..., 2] = 30.0
    out[..., 3] = 31.0
    out[..., 4] = rng.uniform(1.9, 2.1, (records, world))  # each rank's mean loss
    return out


def write_ranks_run(
    run_dir: Path, values: np.ndarray, first_step: int = 10, every: int = 10, rank_layout: RankLayout | None = None
) -> None:
    """One writer's records, as the monitor writes them: the layout in the first one only."""
    rank_layout = rank_layout or layout(values.shape[1])
    write_tensor_records(run_dir, values, TAG, PLUGIN_NAME, rank_layout.content(), first_step, every)


def read_at_once(monkeypatch: pytest.MonkeyPatch, store: ModuleType) -> None:
    """A store (``ranks_store``, ``moe_store``) reads a run again at most every RELOAD_SECS and walks the
    logdir every DISCOVER_SECS; tests append records and read them back at once."""
    monkeypatch.setattr(store, "RELOAD_SECS", 0.0)
    monkeypatch.setattr(store, "DISCOVER_SECS", 0.0)


def ranks_run(logdir: Path, name: str = "job") -> RunRecords:
    """The one run with ranks records under ``logdir``, read by a new store."""
    runs = RanksStore(logdir).runs()
    assert list(runs) == [name]
    return runs[name]


# -- the moe dashboard's records of a synthetic MoE model ----------------------------------------------
def moe_layout(layers: int = 4, experts: int = 8, channels: tuple[str, ...] = (LOAD, BIAS), **changes) -> ExpertLayout:
    fields = {
        "groups": tuple(f"layers.{row + 1}" for row in range(layers)),
        "experts": experts,
        "top_k": 2,
        "routers": (EXPERT_BIAS,) * layers,
        "channels": channels,
        "steps_per_read": 10,
        "reads_per_record": 1,
        "dead_fraction": 0.1,
    }
    return ExpertLayout(**(fields | changes))


def moe_records(count: int, layers: int = 4, experts: int = 8, channels: int = 2, seed: int = 0) -> np.ndarray:
    """(records, channels, layers, experts): loads within 0.8..1.2 of the mean, bias in +-0.01."""
    rng = np.random.default_rng(seed)
    load = rng.uniform(0.8, 1.2, (count, layers, experts))
    load /= load.mean(axis=-1, keepdims=True)
    bias = rng.uniform(-0.01, 0.01, (count, layers, experts))
    return np.stack([load, bias][:channels], axis=1)


def write_moe_run(
    run_dir: Path, values: np.ndarray, first_step: int = 10, every: int = 10, expert_layout: ExpertLayout | None = None
) -> None:
    """One writer's records, as the monitor writes them: the layout in the first one only."""
    _, channels, layers, experts = values.shape
    expert_layout = expert_layout or moe_layout(layers, experts, (LOAD, BIAS)[:channels])
    write_tensor_records(
        run_dir, values, expert_records.TAG, expert_records.PLUGIN_NAME, expert_layout.content(), first_step, every
    )


def moe_run(logdir: Path, name: str = "job") -> MoeRun:
    """The one run with moe records under ``logdir``, read by a new store."""
    runs = MoeStore(logdir).runs()
    assert list(runs) == [name]
    return runs[name]
