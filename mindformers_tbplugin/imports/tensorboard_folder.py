"""Any TensorBoard event folder: ours as it is, and the writers whose tags we map to ours.

Who wrote a folder is told from its tags (each writer always writes its own loss tag):
- MindFormers' built-in ``tensorboard:`` writer (MFLossMonitor in mindformers/core/callback/callback.py):
  ``loss``, ``lm-loss``, ``mtp-loss``, ``load-balancing-loss``, ``learning-rate``, ``grad-norm``,
  ``loss-scale``, ``iteration-time`` (whole milliseconds), ``model-flops-throughput-per-npu``, ...
- Megatron-LM (``training_log`` in megatron/training/training.py): ``lm loss`` (the step's value, not
  the printed mean over ``--log-interval``), ``learning-rate``, ``grad-norm``, ``loss-scale``,
  ``iteration-time`` (seconds), ``throughput`` (TFLOP/s per GPU), ``params-norm``, ``lm loss validation``.
- Hugging Face's TensorBoardCallback: ``train/loss``, ``train/grad_norm``, ``train/learning_rate``,
  ``eval/loss`` and the other ``train/*`` and ``eval/*`` logs.
Tags of no equivalent are kept under ``import/<name>``; a folder of ours keeps every tag as it is,
and one ``mftb import`` wrote gets back what its metadata file records.
"""

from __future__ import annotations

import json
import re
import struct
from collections import Counter
from pathlib import Path

from mindformers_tbplugin.imports.hf_trainer_state import LOSS_DECIMALS, logging_interval
from mindformers_tbplugin.imports.imported_run import METADATA_FILE, Histogram, ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline import metrics as m
from mindformers_tbplugin.tfevents.decode import decode_value, tensor_array, tensor_strings
from mindformers_tbplugin.tfevents.reader import Columns, EventFileReader
from mindformers_tbplugin.tfevents.records import CORRUPT, HEADER_BYTES, split_records
from mindformers_tbplugin.tfevents.wire import read_key, read_varint, skip_field

NAME = "tensorboard"
_FILE_VERSION = b"brain.Event:"
_unpack_f64 = struct.Struct("<d").unpack_from


def _cleaned(mapping: dict[str, tuple[str, float]]) -> dict[str, tuple[str, float]]:
    """``mapping`` plus its tags as tensorboardX writes them (MindFormers' writer is tensorboardX's,
    whose ``_clean_tag`` turns each character outside ``[-/\\w.]`` into ``_``: ``loss_vs_samples``)."""
    return {**{re.sub(r"[^-/\w.]", "_", tag): target for tag, target in mapping.items()}, **mapping}


# Foreign tag -> (our tag, factor to our unit). Throughput tags differ in meaning between writers:
# MindFormers' ``throughput`` is samples/s per device, ours are the job's, so it stays under import/; its
# ``load-balancing-loss`` and ``indexer-loss`` are the losses before their coefficients (the wrapper divides
# them by aux_loss_scale and the layer count), not the contributions train/loss_aux and _indexer hold.
_SAMPLES = " vs samples"
MINDFORMERS = _cleaned(
    {
        "loss": (m.TRAIN_LOSS, 1.0),
        "loss" + _SAMPLES: (m.TRAIN_LOSS + m.VS_SAMPLES_SUFFIX, 1.0),
        "lm-loss": (m.TRAIN_LOSS_LM, 1.0),
        "mtp-loss": (m.TRAIN_LOSS_MTP, 1.0),
        "learning-rate": (m.TRAIN_LR, 1.0),
        "learning-rate" + _SAMPLES: (m.TRAIN_LR + m.VS_SAMPLES_SUFFIX, 1.0),
        "grad-norm": (m.TRAIN_GRAD_NORM, 1.0),
        "loss-scale": (m.TRAIN_LOSS_SCALE, 1.0),
        "iteration-time": (m.PERF_STEP_TIME_MS, 1.0),
        "model-flops-throughput-per-npu": (m.PERF_MODEL_TFLOPS, 1.0),
    }
)
MEGATRON = _cleaned(
    {
        "lm loss": (m.TRAIN_LOSS, 1.0),
        "lm loss" + _SAMPLES: (m.TRAIN_LOSS + m.VS_SAMPLES_SUFFIX, 1.0),
        "learning-rate": (m.TRAIN_LR, 1.0),
        "learning-rate" + _SAMPLES: (m.TRAIN_LR + m.VS_SAMPLES_SUFFIX, 1.0),
        "grad-norm": (m.TRAIN_GRAD_NORM, 1.0),
        "loss-scale": (m.TRAIN_LOSS_SCALE, 1.0),
        "params-norm": (m.TRAIN_PARAM_NORM, 1.0),
        "iteration-time": (m.PERF_STEP_TIME_MS, 1000.0),
        "throughput": (m.PERF_MODEL_TFLOPS, 1.0),
        "lm loss validation": (m.EVAL_LOSS, 1.0),
        "lm loss validation ppl": (m.EVAL_PERPLEXITY, 1.0),
    }
)
HUGGING_FACE = _cleaned(
    {
        "train/loss": (m.TRAIN_LOSS, 1.0),
        "train/grad_norm": (m.TRAIN_GRAD_NORM, 1.0),
        "train/learning_rate": (m.TRAIN_LR, 1.0),
    }
)

# Writer -> (the run's format name, the tags only it writes, its mapping, resolution per our tag).
WRITERS = {
    "megatron": ("megatron-tensorboard", ("lm loss", "lm_loss"), MEGATRON, {}),
    "mindformers": ("mindformers-tensorboard", ("loss",), MINDFORMERS, {m.PERF_STEP_TIME_MS: 1.0}),
    "hugging-face": ("hf-tensorboard", ("train/learning_rate",), HUGGING_FACE, {}),
}


def sniff(path: Path, head: bytes) -> bool:
    """An event file: a framed first record holding ``file_version: "brain.Event:N"``."""
    if len(head) < HEADER_BYTES:
        return False
    length = struct.unpack_from("<Q", head)[0]
    spans, _, _ = split_records(head[: HEADER_BYTES + length + 4])
    if not spans or not spans[0][2]:
        return False
    start, stop, _ = spans[0]
    return _FILE_VERSION in head[start:stop]


# What the scalar reader's stream carries besides points: (marker, step, object, wall time).
_START, _TEXT, _HISTOGRAM, _IMAGE = (f"\x00{kind}" for kind in ("start", "text", "histogram", "image"))


class _FolderReader(EventFileReader):
    """``mftb watch``'s scalar reader (its fast path reads the layout each step repeats without
    decoding), which also passes on, in file order, what that path skips: texts, histograms, images
    and ``SessionLog.START``, each as a marked item of the same stream."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._plugins: dict[str, str] = {}  # tag -> plugin named by its metadata (sent with the first point)
        self.dropped: Counter[str] = Counter()  # what is not imported, in words -> records

    def _parse_event(self, buf: bytes, i: int, end: int, points: list) -> None:
        super()._parse_event(buf, i, end, points)  # the scalar points
        step, wall_time, summary = 0, 0.0, None
        while i < end:
            key, i = read_key(buf, i)
            if key == 0x09:
                wall_time = _unpack_f64(buf, i)[0]
                i += 8
            elif key == 0x10:
                step, i = read_varint(buf, i)
                step = step - (1 << 64) if step >= 1 << 63 else step
            elif key in (0x2A, 0x3A):  # summary; session_log, whose status START (1) purges later points
                length, i = read_varint(buf, i)
                if key == 0x2A:
                    summary = (i, i + length)
                elif buf[i : i + 2] == b"\x08\x01":
                    points.append((_START, step, None, wall_time))
                i += length
            else:
                if key == 0x22:  # graph_def
                    self.dropped["the graph (graph_def)"] += 1
                i = skip_field(buf, i, key)
        i, stop = summary or (0, 0)
        while i < stop:
            key, i = read_key(buf, i)
            if key != 0x0A:
                i = skip_field(buf, i, key)
                continue
            length, i = read_varint(buf, i)
            item = self._other_value(buf, i, i + length)
            if item is not None:
                points.append((item[0], step, (item[1], item[2]), wall_time))
            i += length

    def _other_value(self, buf: bytes, i: int, end: int) -> tuple[str, str, object] | None:
        """(marker, tag, object) of a text, histogram or image value; None for anything else."""
        value = decode_value(buf, i, end)
        if value.has_metadata:
            self._plugins[value.tag] = value.plugin_name
        plugin = self._plugins.get(value.tag, "")
        if value.tensor is not None:
            if plugin == "text":
                return _TEXT, value.tag, b"\n".join(tensor_strings(value.tensor)).decode("utf-8", "replace")
            histogram = _tensor_histogram(value.tensor) if plugin == "histograms" else None
            if histogram is None and plugin not in ("", "scalars"):
                self.dropped[f"the {plugin} plugin's records"] += 1
            return None if histogram is None else (_HISTOGRAM, value.tag, histogram)
        if plugin == "hparams":
            self.dropped["the hparams plugin's records"] += 1
            return None
        while i < end:  # ``Summary.Value.image`` (4) and ``histo`` (5), which decode_value skips
            key, i = read_key(buf, i)
            if key in (0x22, 0x2A):
                length, i = read_varint(buf, i)
                if key == 0x22:
                    image = _image_bytes(buf, i, i + length)
                    return (_IMAGE, value.tag, image) if image else None
                return _HISTOGRAM, value.tag, _histo(buf, i, i + length)
            i = skip_field(buf, i, key)
        return None


def read(files: list[Path]) -> ImportedRun:
    """The points of one folder's event files, in name order (TensorBoard's), tags mapped to ours."""
    run = ImportedRun(source=list(files), format=NAME)
    scalars, wall_times = run.scalars, run.wall_times
    families = {_TEXT: run.texts, _HISTOGRAM: run.histograms, _IMAGE: run.images}
    stops: list[str] = []
    dropped: Counter[str] = Counter()
    last_step = None
    for path in files:
        reader = _FolderReader(path)
        for block in reader.blocks():
            if isinstance(block, Columns):  # a run of records of one layout: whole columns at once
                for step, wall_time in zip(block.steps, block.walls, strict=True):
                    wall_times.setdefault(step, wall_time)
                last_step = block.steps[-1]
                for tag, values in zip(block.names, block.values, strict=True):
                    scalars.setdefault(tag, {}).update(zip(block.steps, values, strict=True))
                continue
            _take(run, block, families, last_step)
            last_step = block[-1][1]
        stops += [f"{path.name}: record at byte {at} fails its checksum, skipped" for at in reader.bad_records]
        dropped.update(reader.dropped)
        if reader.problem is not None:
            how = "a corrupt record header" if reader.problem == CORRUPT else "the middle of a record"
            stops.append(f"{path}: stops at byte {reader.offset} ({how}); what precedes is imported")
    run.skipped += [f"{what}: {count} record{'s' * (count > 1)}" for what, count in sorted(dropped.items())]
    run = _mapped(run, files)
    run.stopped_at = "; ".join(stops) or None
    return run


def _take(run: ImportedRun, points: list, families: dict, last_step: int | None) -> None:
    """Points (and the marked items among them) one by one."""
    scalars, wall_times = run.scalars, run.wall_times
    for tag, step, value, wall_time in points:
        if step != last_step and tag != _START:  # a restart mark carries when it was written, not the step's time
            wall_times.setdefault(step, wall_time)
            last_step = step
        series = scalars.get(tag)
        if series is not None:
            series[step] = value
        elif tag[0] != "\x00":
            scalars[tag] = {step: value}
        elif tag == _START:
            _purge(run, step)
        else:
            families[tag].setdefault(value[0], {})[step] = value[1]


def _purge(run: ImportedRun, step: int) -> None:
    """A ``SessionLog.START`` at ``step``: TensorBoard drops the points at or after it written before."""
    for family in (run.scalars, run.histograms, run.images, run.texts):
        for series in family.values():
            for dropped in [s for s in series if s >= step]:
                del series[dropped]


def _mapped(raw: ImportedRun, files: list[Path]) -> ImportedRun:
    """``raw``'s points under our tag names, by the writer its tags reveal."""
    metadata = _metadata(files)
    tags = set(raw.scalars)
    every_tag = tags.union(raw.histograms, raw.images, raw.texts)
    writer = next((w for w, (_, markers, _, _) in WRITERS.items() if tags.intersection(markers)), None)
    if metadata or (writer in ("megatron", "mindformers") and m.TRAIN_LOSS in tags):
        writer = None  # a run mftb import wrote, or one of ours with a custom tag spelled like theirs
    if writer is None:
        raw.format = metadata.get("format", NAME)
        if not any(m.is_builtin_tag(tag) for tag in tags) and tags:
            _rename(raw, {tag: (m.IMPORT_PREFIX + tag, 1.0) for tag in every_tag if not m.is_builtin_tag(tag)})
        raw.averaged_over = {k: int(v) for k, v in metadata.get("averaged_over", {}).items()}
        raw.resolution = {k: float(v) for k, v in metadata.get("resolution", {}).items()}
        raw.notes.extend(metadata.get("notes", []))
        return raw
    fmt, _, mapping, resolution = WRITERS[writer]
    raw.format = fmt
    renames = {tag: mapping.get(tag, (m.IMPORT_PREFIX + tag, 1.0)) for tag in every_tag}
    if writer == "hugging-face":  # its eval/* logs are ours already
        renames.update({tag: (tag, 1.0) for tag in every_tag if tag.startswith(m.EVAL_PREFIX)})
    _rename(raw, renames)
    raw.resolution = {tag: value for tag, value in resolution.items() if tag in raw.scalars}
    if writer == "hugging-face" and m.TRAIN_LOSS in raw.scalars:  # Trainer logs its loss as hf_trainer_state says
        interval = logging_interval(list(raw.scalars[m.TRAIN_LOSS]))
        raw.averaged_over = {m.TRAIN_LOSS: interval} if interval > 1 else {}
        raw.resolution[m.TRAIN_LOSS] = 10.0**-LOSS_DECIMALS
    if writer == "megatron" and m.PERF_STEP_TIME_MS in raw.scalars:
        raw.notes.append("iteration-time converted from seconds to milliseconds")
    return raw


def _rename(run: ImportedRun, renames: dict[str, tuple[str, float]]) -> None:
    scalars: dict[str, dict[int, float]] = {}
    for tag, series in run.scalars.items():
        ours, factor = renames.get(tag, (tag, 1.0))
        scalars[ours] = series if factor == 1.0 else {step: value * factor for step, value in series.items()}
    run.scalars = scalars
    for family in (run.histograms, run.images, run.texts):
        for tag in [t for t in family if t in renames and renames[t][0].startswith(m.IMPORT_PREFIX)]:
            family[renames[tag][0]] = family.pop(tag)


def _metadata(files: list[Path]) -> dict:
    """What ``mftb import`` recorded beside the event files (format, averaged_over, resolution)."""
    path = files[0].parent / METADATA_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _histo(buf: bytes, i: int, end: int) -> Histogram:
    """A ``HistogramProto``: min 1, max 2, num 3, sum 4, sum_squares 5 (doubles), bucket_limit 6, bucket 7."""
    names = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}
    stats = dict.fromkeys(names.values(), 0.0)
    lists: dict[int, list[float]] = {6: [], 7: []}
    while i < end:
        key, i = read_key(buf, i)
        field, wire = key >> 3, key & 7
        if field in names and wire == 1:
            stats[names[field]] = _unpack_f64(buf, i)[0]
            i += 8
        elif field in lists and wire == 2:
            length, i = read_varint(buf, i)
            lists[field].extend(v for (v,) in struct.iter_unpack("<d", buf[i : i + length]))
            i += length
        elif field in lists and wire == 1:
            lists[field].append(_unpack_f64(buf, i)[0])
            i += 8
        else:
            i = skip_field(buf, i, key)
    return Histogram(stats, lists[6], lists[7])


def _tensor_histogram(tensor: bytes) -> Histogram | None:
    """TensorFlow 2's histogram tensor: k buckets of (left edge, right edge, count), float64 or float32."""
    dtype, shape, content = tensor_array(tensor)
    fmt = {1: "<f", 2: "<d"}.get(dtype)
    if fmt is None or len(shape) != 2 or shape[1] != 3 or not content:
        return None
    flat = [v for (v,) in struct.iter_unpack(fmt, content)]
    lefts, rights, counts = flat[0::3], flat[1::3], flat[2::3]
    num = sum(counts)
    centres = [(a + b) / 2 for a, b in zip(lefts, rights, strict=True)]
    stats = {
        "min": lefts[0] if lefts else 0.0,
        "max": rights[-1] if rights else 0.0,
        "num": num,
        "sum": sum(c * n for c, n in zip(centres, counts, strict=True)),
        "sum_squares": sum(c * c * n for c, n in zip(centres, counts, strict=True)),
    }
    return Histogram(stats, rights, counts)


def _image_bytes(buf: bytes, i: int, end: int) -> bytes:
    """``Summary.Image.encoded_image_string`` (field 4)."""
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x22:
            length, i = read_varint(buf, i)
            return bytes(buf[i : i + length])
        i = skip_field(buf, i, key)
    return b""


FORMAT = SourceFormat(
    name=NAME,
    description="TensorBoard event folder: ours, MindFormers' tensorboard: writer, Megatron-LM, Hugging Face",
    sniff=sniff,
    read=read,
)
