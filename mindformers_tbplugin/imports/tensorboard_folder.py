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
from pathlib import Path

from mindformers_tbplugin.imports.imported_run import METADATA_FILE, Histogram, ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline import metrics as m
from mindformers_tbplugin.tfevents.decode import decode_value, tensor_array, tensor_strings
from mindformers_tbplugin.tfevents.records import CORRUPT, HEADER_BYTES, RecordReader, split_records
from mindformers_tbplugin.tfevents.wire import read_key, read_varint, skip_field, tensor_scalar

NAME = "tensorboard"
_FILE_VERSION = b"brain.Event:"
_unpack_f64 = struct.Struct("<d").unpack_from


def _cleaned(mapping: dict[str, tuple[str, float]]) -> dict[str, tuple[str, float]]:
    """``mapping`` plus its tags as tensorboardX writes them (MindFormers' writer is tensorboardX's,
    whose ``_clean_tag`` turns each character outside ``[-/\\w.]`` into ``_``: ``loss_vs_samples``)."""
    return {**{re.sub(r"[^-/\w.]", "_", tag): target for tag, target in mapping.items()}, **mapping}


# Foreign tag -> (our tag, factor to our unit). Throughput tags differ in meaning between writers:
# MindFormers' ``throughput`` is samples/s per device, ours are the job's, so it stays under import/.
_SAMPLES = " vs samples"
MINDFORMERS = _cleaned(
    {
        "loss": (m.TRAIN_LOSS, 1.0),
        "loss" + _SAMPLES: (m.TRAIN_LOSS + m.VS_SAMPLES_SUFFIX, 1.0),
        "lm-loss": (m.TRAIN_LOSS_LM, 1.0),
        "mtp-loss": (m.TRAIN_LOSS_MTP, 1.0),
        "load-balancing-loss": (m.TRAIN_LOSS_AUX, 1.0),
        "indexer-loss": (m.TRAIN_LOSS_INDEXER, 1.0),
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


class _Collector:
    """One run's points as they come out of the files, in TensorBoard's terms (foreign tags as written)."""

    def __init__(self) -> None:
        self.run = ImportedRun(source=[], format=NAME)
        self.scalar_tensor: dict[str, bool] = {}  # tag -> its metadata says scalar (sent with the first point)
        self.plugins: dict[str, str] = {}

    def purge(self, step: int) -> None:
        """A ``SessionLog.START`` at ``step``: TensorBoard drops the points at or after it written before."""
        for family in (self.run.scalars, self.run.histograms, self.run.images, self.run.texts):
            for series in family.values():
                for dropped in [s for s in series if s >= step]:
                    del series[dropped]

    def value(self, buf: bytes, i: int, end: int, step: int) -> None:
        value = decode_value(buf, i, end)
        tag, run = value.tag, self.run
        if value.has_metadata:
            self.scalar_tensor[tag] = value.is_scalar
            self.plugins[tag] = value.plugin_name
        if value.simple_value is not None:
            run.add(tag, step, value.simple_value)
            return
        plugin = self.plugins.get(tag, "")
        if value.tensor is not None:
            if plugin == "text":
                run.texts.setdefault(tag, {})[step] = b"\n".join(tensor_strings(value.tensor)).decode(
                    "utf-8", "replace"
                )
            elif plugin == "histograms":
                histogram = _tensor_histogram(value.tensor)
                if histogram is not None:
                    run.histograms.setdefault(tag, {})[step] = histogram
            elif self.scalar_tensor.get(tag, True):
                number = tensor_scalar(value.tensor, 0, len(value.tensor))
                if number is not None:
                    run.add(tag, step, number)
            return
        self._old_style(buf, i, end, tag, step)

    def _old_style(self, buf: bytes, i: int, end: int, tag: str, step: int) -> None:
        """``Summary.Value.image`` (4) and ``histo`` (5), which :func:`decode_value` skips."""
        while i < end:
            key, i = read_key(buf, i)
            if key in (0x22, 0x2A):
                length, i = read_varint(buf, i)
                if key == 0x22:
                    image = _image_bytes(buf, i, i + length)
                    if image:
                        self.run.images.setdefault(tag, {})[step] = image
                else:
                    self.run.histograms.setdefault(tag, {})[step] = _histo(buf, i, i + length)
                i += length
            else:
                i = skip_field(buf, i, key)


def read(files: list[Path]) -> ImportedRun:
    """The points of one folder's event files, in name order (TensorBoard's), tags mapped to ours."""
    collector = _Collector()
    stops: list[str] = []
    for path in files:
        records = RecordReader(path)
        for base, buf, spans in records.chunks():
            for start, stop, intact in spans:
                if not intact:
                    stops.append(
                        f"{path.name}: record at byte {base + start - HEADER_BYTES} fails its checksum, skipped"
                    )
                    continue
                _event(collector, buf, start, stop)
        if records.problem is not None:
            how = "a corrupt record header" if records.problem == CORRUPT else "the middle of a record"
            stops.append(f"{path}: stops at byte {records.offset} ({how}); what precedes is imported")
    raw = collector.run
    run = _mapped(raw, files)
    run.source = list(files)
    run.stopped_at = "; ".join(stops) or None
    return run


def _event(collector: _Collector, buf: bytes, i: int, end: int) -> None:
    step, wall_time, summary = 0, 0.0, None
    while i < end:
        key, i = read_key(buf, i)
        if key == 0x09:
            wall_time = _unpack_f64(buf, i)[0]
            i += 8
        elif key == 0x10:
            step, i = read_varint(buf, i)
            step = step - (1 << 64) if step >= 1 << 63 else step
        elif key == 0x2A:  # summary
            length, i = read_varint(buf, i)
            summary = (i, i + length)
            i += length
        elif key == 0x3A:  # session_log: START (status 1) purges later points
            length, i = read_varint(buf, i)
            if buf[i : i + 2] == b"\x08\x01":
                collector.purge(step)
            i += length
        else:
            i = skip_field(buf, i, key)
    if summary is None:
        return
    collector.run.wall_times.setdefault(step, wall_time)
    i, stop = summary
    while i < stop:
        key, i = read_key(buf, i)
        if key != 0x0A:
            i = skip_field(buf, i, key)
            continue
        length, i = read_varint(buf, i)
        collector.value(buf, i, i + length, step)
        i += length


def _mapped(raw: ImportedRun, files: list[Path]) -> ImportedRun:
    """``raw``'s points under our tag names, by the writer its tags reveal."""
    metadata = _metadata(files)
    tags = set(raw.scalars)
    every_tag = tags.union(raw.histograms, raw.images, raw.texts)
    writer = next((w for w, (_, markers, _, _) in WRITERS.items() if tags.intersection(markers)), None)
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
