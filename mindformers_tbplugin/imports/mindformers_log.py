"""MindFormers' printed training log: MFLossMonitor's line of every release, and the 2.x PyNative
trainer's LossCallback line, read from one rank's ``output/log/rank_N/info.log`` (and its rotated
parts) or msrun's ``worker_N.log``, whatever the logger's prefix.

The lines, as mindformers/core/callback/callback.py (``print_output_info``) and
mindformers/pynative/callback/loss_callback.py (``_print_log``) format them::

    { Epoch:[  1/  2], step:[    3/   10], loss:[5.509977/5.537569], lm_loss: ..., per_step_time: 177ms,
      lr: 0.0015, overflow cond: False, loss_scale: 1.0, global_norm: [1.0168085], train_throughput_per_npu: 0.000T
    { step:[    3/   12], consumed_samples: 12, global_batch_size: 4, loss:   6.883348, per_step_time:    365ms,
      load_balancing_loss: ..., mtp_1_loss: ..., lr: 1.000000e-03, grad_norm:   1.113831, throughput:   0.00T }

- the step's loss is the first number of ``loss:[step/running mean]`` (``loss: x`` in sink mode), printed
  with 3 decimals up to 1.6 and 6 from 1.7; the PyNative trainer prints 6;
- the classic line counts steps per epoch: the global step is (epoch - 1) x steps per epoch + step, in
  sink mode too (its step counts are folded the same way before they are printed);
- lr, global_norm and loss_scale are printed with ``%s``: numpy's or Python's shortest text that reads
  back as the same number, so their resolution is float32's own;
- ``lm_loss`` and ``mtp_loss`` (1.7+) are the parts of the loss as our train/loss_lm and train/loss_mtp
  hold them, the PyNative trainer's ``mtp_<k>_loss`` add up to train/loss_mtp; ``load_balancing_loss``
  and ``indexer_loss`` are printed before their coefficients, so they keep their names under import/.
"""

from __future__ import annotations

import re
from pathlib import Path

from mindformers_tbplugin.imports import printed_log
from mindformers_tbplugin.imports.imported_run import ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline import metrics

NAME = "mindformers-log"
_CLASSIC = "{ Epoch:["
_PYNATIVE = "{ step:["
# The progress line MFLossMonitor prints after each step's line: "  4.2% |███   | 1.23456 samples/s/p  0:00:10 }"
_PROGRESS = " samples/s/p"
_LOGGER_RECORD = re.compile(r"\[mindformers/[\w/.-]+\.py:\d+\]")
_MTP_DEPTH = re.compile(r"mtp_\d+_loss")
# One field's value as a layout's pattern captures it: what _clean keeps of it, maybe with spaces after.
_VALUE = r"[ \t]*\[?[ \t]*([^,\]}\n]*)\]?"
# The line's prefix (its timestamp captured) and, after the fields, the progress line that may follow.
_PREFIX = r"^(?:[^\n{]*?" + printed_log.TIMESTAMP + r")?[^\n{]*\{ "
_TAIL = r"[ \t]*\}?[ \t]*$(?:\n[^\n]*\|[ \t]*(\S+)" + _PROGRESS + r"[^\n]*$)?"

# Field -> our tag; fields not here (and not Epoch/step) go under import/.
TAGS = {
    "loss": metrics.TRAIN_LOSS,
    "lm_loss": metrics.TRAIN_LOSS_LM,
    "mtp_loss": metrics.TRAIN_LOSS_MTP,
    "per_step_time": metrics.PERF_STEP_TIME_MS,
    "lr": metrics.TRAIN_LR,
    "overflow cond": metrics.TRAIN_OVERFLOW,
    "loss_scale": metrics.TRAIN_LOSS_SCALE,
    "global_norm": metrics.TRAIN_GRAD_NORM,
    "grad_norm": metrics.TRAIN_GRAD_NORM,
    "train_throughput_per_npu": metrics.PERF_MODEL_TFLOPS,
    "throughput": metrics.PERF_MODEL_TFLOPS,
}
# Printed with %s (shortest round-trip text) by the classic line.
_SHORTEST_TEXT = frozenset({"lr", "global_norm", "loss_scale"})
_FLOAT32_SPACING = 2.0**-23  # relative distance between neighbouring float32 values, at most
PROGRESS_TAG = metrics.IMPORT_PREFIX + "samples_per_s_per_npu"


def _clean(value: str) -> str:
    """A field's text without its brackets (``[1.0168085]``, ``[  1/  1]``); units stay (``177ms``)."""
    value = value.strip()
    if value.startswith("["):
        value = value[1:]
    if value.endswith("]"):
        value = value[:-1]
    return value.strip()


def _without_unit(texts: tuple[str, ...]) -> list[str] | tuple[str, ...]:
    """``177ms`` -> ``177``, ``0.000T`` -> ``0.000``, for a column whose values carry a unit (float() takes
    the spaces left)."""
    first = texts[0].rstrip()
    for unit in ("ms", "T"):
        if first.endswith(unit) and first != "True":
            return "\n".join(texts).replace(unit, "").split("\n")
    return texts


def _fields(body: str) -> tuple[list[str], list[str]] | None:
    """``{ key: value, key: value, ... }`` -> (keys, cleaned texts); None when it is not a step's line."""
    inner = body[2:].rstrip()
    if inner.endswith("}"):
        inner = inner[:-1].rstrip()
    keys: list[str] = []
    texts: list[str] = []
    for piece in inner.split(", "):
        key, colon, value = piece.partition(":")
        if colon:  # a piece without a colon: the rest of a note ("N/A (non-last PP stage, refer to ...)")
            keys.append(key.strip())
            texts.append(_clean(value))
    if "step" not in keys or "loss" not in keys:
        return None
    for key in ("Epoch", "step"):  # "[  1/  2]": the count and, under "<key>/", what it counts to
        if key in keys:
            at = keys.index(key)
            count, slash, total = texts[at].partition("/")
            if not slash:
                return None
            texts[at : at + 1] = [count.strip(), total.strip()]
            keys.insert(at + 1, key + "/")
    at = keys.index("loss")
    texts[at] = texts[at].partition("/")[0].strip()  # loss:[step/running mean]: the step's own
    return keys, texts


def _split(text: str, pos: int, line: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The step line at ``pos`` of ``text`` -> (keys, (timestamp, *values, progress))."""
    start = line.find(_CLASSIC)
    if start < 0:
        start = line.find(_PYNATIVE)
    parsed = _fields(line[start:])
    if parsed is None:
        return None
    keys, texts = parsed
    after = pos + len(line)
    following = text[after : text.find("\n", after)]
    end = following.find(_PROGRESS)
    progress = following[following.rfind("|", 0, end) + 1 : end].strip() if end > 0 else ""
    return tuple(keys), (printed_log.timestamp_in(line[:start]), *texts, progress)


def _compile(keys: tuple[str, ...]) -> re.Pattern[str]:
    fields = []
    for key in keys:
        if key in ("Epoch", "step"):
            fields.append(key + r":\[[ \t]*(\d+)/[ \t]*(\d+)\]")
        elif key == "loss":
            fields.append(r"loss:[ \t]*\[?[ \t]*([^,/\]\n]*)(?:/[^,\]\n]*)?\]?")
        elif not key.endswith("/"):
            fields.append(re.escape(key) + ":" + _VALUE)
    return re.compile(_PREFIX + ", ".join(fields) + _TAIL, re.MULTILINE)


def _count(text: str) -> int:
    return text.count(_CLASSIC) + text.count(_PYNATIVE)


def _is_step_line(line: str) -> bool:
    return _CLASSIC in line or _PYNATIVE in line


def _read(paths: list[Path], run: ImportedRun) -> None:
    table = printed_log.Table(_split, _compile)
    for _ in table.read(paths, _count, _is_step_line):
        pass
    repeated = 0
    for keys, columns in table.columns():
        stamps, values_of, progress = columns[0], dict(zip(keys, columns[1:-1], strict=True)), columns[-1]
        steps = list(map(int, values_of.pop("step")))
        per_epoch = map(int, values_of.pop("step/"))
        classic = "Epoch" in values_of
        if classic:  # fold epoch/step into the global step
            epochs = map(int, values_of.pop("Epoch"))
            del values_of["Epoch/"]
            steps = [(e - 1) * n + s for e, n, s in zip(epochs, per_epoch, steps, strict=True)]
        repeated += len(steps) - len(set(steps))
        depths: list[tuple[list[float | None], float]] = []  # (values, resolution) per MTP depth
        for key, raw in values_of.items():
            texts = _texts(key, raw)
            values, not_numbers = printed_log.numbers(texts)
            if not_numbers:
                run.skipped.append(f"{not_numbers} value(s) of {key!r} that are not numbers")
            series = printed_log.series(steps, values, not_numbers)
            if not series:
                continue
            tag = TAGS.get(key) or metrics.IMPORT_PREFIX + printed_log.import_name(key)
            if tag in run.scalars:  # a later block (another layout): its lines win
                run.scalars[tag].update(series)
            else:
                run.scalars[tag] = series
            if key == "overflow cond":
                continue
            largest = max(map(abs, series.values()))
            if classic and key in _SHORTEST_TEXT:
                found = largest * _FLOAT32_SPACING
            else:
                found = printed_log.resolution(texts[0], largest)
            run.resolution[tag] = max(run.resolution.get(tag, 0.0), found)
            if _MTP_DEPTH.fullmatch(key):
                depths.append((values, found))
        if depths:  # the PyNative trainer's mtp_<k>_loss, one per depth: train/loss_mtp is their sum
            columns_of = [values for values, _ in depths]
            sums = [sum(parts) if None not in parts else None for parts in zip(*columns_of, strict=True)]
            run.scalars.setdefault(metrics.TRAIN_LOSS_MTP, {}).update(printed_log.series(steps, sums, sums.count(None)))
            run.resolution[metrics.TRAIN_LOSS_MTP] = sum(found for _, found in depths)
        if any(progress):
            kept = progress if all(progress) else [text or "nan" for text in progress]
            values, not_numbers = printed_log.numbers(kept)
            points = printed_log.series(steps, values, not_numbers)
            run.scalars.setdefault(PROGRESS_TAG, {}).update(
                points if kept is progress else {s: v for s, v, t in zip(steps, values, progress, strict=True) if t}
            )
        run.wall_times.update(printed_log.wall_times(steps, stamps))
    if repeated:
        run.skipped.append(
            f"{repeated} step line(s) printed again for a step already printed (a restarted training in "
            "the same log?): the last line's values kept"
        )
    if table.bad:
        run.skipped.append(table.bad_lines_note("MindFormers' step line"))


def _texts(key: str, texts: tuple[str, ...]) -> list[str] | tuple[str, ...]:
    if key == "overflow cond":
        return "\n".join(texts).replace("False", "0").replace("True", "1").split("\n")
    return _without_unit(texts)


def read(paths: list[Path]) -> ImportedRun:
    """One rank's log: a file and its rotated parts, oldest first (detect.py groups them, and makes
    several ranks' logs ``rank_<id>`` sub-runs)."""
    run = ImportedRun(source=list(paths), format=NAME)
    _read(paths, run)
    return run


def sniff(path: Path, head: bytes) -> bool:
    """MindFormers' logger's records (``[mindformers/core/callback/callback.py:747]``, in the log files'
    and in the console's format alike) or a step line in the file's first bytes: a training's first
    step line comes after its config, often beyond them."""
    text = head.decode("utf-8", errors="replace")
    return _LOGGER_RECORD.search(text) is not None or any(marker in text for marker in (_CLASSIC, _PYNATIVE))


FORMAT = SourceFormat(
    NAME,
    "MindFormers' printed training log (MFLossMonitor's line of every release, the 2.x PyNative trainer's "
    "LossCallback line): output/log/rank_N/info.log, msrun_log/worker_N.log",
    sniff,
    read,
    rotated=True,
)
