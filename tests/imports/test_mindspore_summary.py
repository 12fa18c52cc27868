"""MindSpore summary files written by MindSpore's own SummaryRecord and SummaryCollector (a tiny
``Model.train`` on CPU), imported and checked value by value against what was recorded; read by a
process where MindSpore cannot be imported."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import printed_json, subprocess_env
from PIL import Image

from mindformers_tbplugin.imports.detect import read_source
from mindformers_tbplugin.imports.mindspore_summary import sniff

pytestmark = pytest.mark.process

# SummaryRecord.add_value for each kind, five steps; prints what it recorded.
SUMMARY_RECORD = """
import json, sys
import numpy as np
import mindspore as ms
from mindspore import Tensor
from mindspore.train.summary import SummaryRecord
ms.set_context(mode=ms.PYNATIVE_MODE)
recorded = {"loss": {}, "lr": {}, "grad_scale": {}, "w": {}, "image": {}}
rng = np.random.RandomState(0)
with SummaryRecord(sys.argv[1]) as record:
    for step in range(1, 6):
        loss = np.float32(3.0 / step + 0.125)
        w = rng.normal(size=200).astype(np.float32) * step
        image = rng.rand(1, 3, 6, 9).astype(np.float32)  # in [0, 1]: MindSpore stores x 255 as uint8
        record.add_value("scalar", "loss", Tensor(loss))
        record.add_value("scalar", "lr", Tensor(np.float32(1e-3 / step)))
        record.add_value("tensor", "grad_scale", Tensor(np.array([1024.0 * step], np.float32)))
        record.add_value("tensor", "embedding", Tensor(np.ones((4, 2), np.float32)))
        record.add_value("histogram", "w", Tensor(w))
        record.add_value("image", "sample", Tensor(image))
        record.record(step)
        recorded["loss"][step] = float(loss)
        recorded["lr"][step] = float(np.float32(1e-3 / step))
        recorded["grad_scale"][step] = 1024.0 * step
        recorded["w"][step] = w.tolist()
        recorded["image"][step] = (image[0].transpose(1, 2, 0) * 255).astype(np.uint8).tolist()
print("RECORDED " + json.dumps(recorded))
"""

# SummaryCollector in a tiny Model.train: its loss every step, parameter histograms, the graph, lineage.
SUMMARY_COLLECTOR = """
import json, sys
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn, Model
from mindspore.train import Callback, SummaryCollector
ms.set_context(mode=ms.GRAPH_MODE)
x = np.random.RandomState(0).rand(48, 4).astype(np.float32)
data = ds.NumpySlicesDataset({"x": x, "y": x.sum(1, keepdims=True)}, shuffle=False).batch(8)
net = nn.Dense(4, 1)
losses = {}
class Losses(Callback):
    def on_train_step_end(self, run_context):
        params = run_context.original_args()
        losses[params.cur_step_num] = float(params.net_outputs.asnumpy())
# collect_dataset_graph off: MindSpore's dataset-graph packer fails under the installed protobuf.
collector = SummaryCollector(sys.argv[1], collect_freq=1, collect_specified_data={"collect_dataset_graph": False})
Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01)).train(
    2, data, callbacks=[collector, Losses()], dataset_sink_mode=False)
print("LOSSES " + json.dumps(losses))
"""


def record(tmp_path: Path, code: str, prefix: str) -> tuple[Path, dict]:
    folder = tmp_path / "summary"
    return folder, printed_json(code.replace("sys.argv[1]", repr(str(folder))), tmp_path, prefix)


@pytest.fixture(scope="module")
def summary_record(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    return record(tmp_path_factory.mktemp("summary_record"), SUMMARY_RECORD, "RECORDED")


def test_summary_record_values_as_recorded(summary_record: tuple[Path, dict]) -> None:
    folder, recorded = summary_record
    run = read_source([folder])
    assert run.format == "mindspore-summary"
    steps = {int(step): value for step, value in recorded["loss"].items()}
    assert run.scalars["train/loss"] == steps
    assert run.scalars["train/lr"] == {int(s): v for s, v in recorded["lr"].items()}
    assert run.scalars["import/grad_scale"] == {int(s): v for s, v in recorded["grad_scale"].items()}
    assert "tensor 'embedding' (8 elements, not a scalar): 5 records" in run.skipped
    for step, values in recorded["w"].items():
        histogram = run.histograms["import/w"][int(step)]
        values = np.asarray(values, np.float32)
        assert histogram.stats["min"] == values.min() and histogram.stats["max"] == values.max()
        assert histogram.stats["sum"] == pytest.approx(values.astype(np.float64).sum())
        # TensorBoard's buckets: (previous limit, limit]; the first, empty one ends at the lowest edge.
        assert histogram.counts[0] == 0 and histogram.limits[0] == values.min()
        assert sum(histogram.counts) == values.size
        assert histogram.limits[-1] == pytest.approx(float(values.max()), rel=1e-6)
    for step, pixels in recorded["image"].items():
        png = run.images["import/sample"][int(step)]
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(png))), np.asarray(pixels, np.uint8))


def test_summary_collector_in_model_train(tmp_path: Path) -> None:
    folder, losses = record(tmp_path, SUMMARY_COLLECTOR, "LOSSES")
    run = read_source([folder])
    assert run.scalars["train/loss"] == pytest.approx({int(s): v for s, v in losses.items()}, rel=1e-6)
    assert len(losses) == 12
    assert set(run.histograms) == {"import/weight/auto", "import/bias/auto"}
    assert "the computational graph (graph_def): 1 record" in run.skipped
    assert any(what.endswith("lineage (MindInsight's training lineage)") for what in run.skipped)


def test_truncated_summary_file(summary_record: tuple[Path, dict], tmp_path: Path) -> None:
    folder, recorded = summary_record
    (path,) = [p for p in folder.iterdir() if p.name.endswith("_MS")]
    data = path.read_bytes()
    (tmp_path / path.name).write_bytes(data[: len(data) - 40])
    run = read_source([tmp_path / path.name])
    assert run.scalars["train/loss"] == {s: recorded["loss"][str(s)] for s in range(1, 5)}
    assert f"{tmp_path / path.name}: stops at byte " in run.stopped_at


def test_sniffed_by_content(summary_record: tuple[Path, dict], tmp_path: Path) -> None:
    folder, _ = summary_record
    (path,) = [p for p in folder.iterdir() if p.name.endswith("_MS")]
    assert sniff(path, path.read_bytes()[:65536])
    fake = tmp_path / "events.out.events.summary.1.0.host_MS"
    fake.write_text("MindSpore.Event:1\n")
    assert not sniff(fake, fake.read_bytes())


# Reads the files with every import of mindspore or mindformers refused.
WITHOUT_MINDSPORE = """
import json, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mindspore", "mindformers"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Refuse())
from pathlib import Path
from mindformers_tbplugin.imports.detect import read_source
run = read_source([Path(sys.argv[1])])
assert not [m for m in sys.modules if m.split(".")[0] in ("mindspore", "mindformers")]
print("READ " + json.dumps(run.scalars["train/loss"]))
"""


def test_read_where_mindspore_cannot_be_imported(summary_record: tuple[Path, dict]) -> None:
    folder, recorded = summary_record
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_MINDSPORE, str(folder)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("READ ")]
    assert json.loads(line[5:]) == recorded["loss"]
