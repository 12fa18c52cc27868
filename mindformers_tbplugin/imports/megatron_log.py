"""Megatron-LM's printed training log: ``training_log``'s line of every release (megatron/training.py up
to core_r0.5, megatron/training/training.py from core_r0.6), Megatron-DeepSpeed's and MindSpeed-LLM's
(its Megatron trainer's and its FSDP2 trainer's), and the validation lines, whatever the launcher put
in front of them (``[default7]:``, ``0:``, a logger's prefix)::

     [2024-05-01 10:00:00] iteration      100/    1000 | consumed samples: 3200 | ... | lm loss: 2.345678E+00 |
     loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |
     validation loss at iteration 100 | lm loss value: 2.301234E+00 | lm loss PPL: 9.986543E+00 |

Fields are read as ``key: value`` pairs, never in a fixed order: forks add fields, options add or drop
them (MoE losses, ``mtp_<k> loss``, throughput, energy). The losses (and the step time, the throughput)
are means over the ``--log-interval`` steps up to the printed iteration: the run records that interval,
taken from the iteration numbers, in ``averaged_over``.

``lm loss`` is the language-model loss alone (Megatron adds the MoE and MTP losses in the backward pass,
outside it): it is train/loss and train/loss_lm. The MoE and MTP losses are printed before their
coefficients, so they keep their names under import/.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from mindformers_tbplugin.imports import printed_log
from mindformers_tbplugin.imports.imported_run import ImportedRun, SourceFormat
from mindformers_tbplugin.pipeline import metrics

NAME = "megatron-log"
_HEAD = re.compile(r"iteration[ \t]+(\d+)/[ \t]*(\d+)[ \t]*\|")
_SNIFF = re.compile(r"iteration[ \t]+\d+/[ \t]*\d+[ \t]*\|.*:")
_LOOKS = re.compile(r"iteration[ \t]+\S*\d\S*/[ \t]*\S+[ \t]*\|")  # meant as an iteration line, parsed or not
_VALIDATION = re.compile(
    r"validation(\S*) loss at (?:iteration (\d+)(?: on (validation|test) set)?|the end of training for (val|test) data)"
    r"[ \t]*\|([^\n]*)$",
    re.MULTILINE,
)
# What Megatron-LM (and its forks) print at start: megatron/training/arguments.py _print_args, validate_args.
_BANNERS = ("------------------------ arguments ------------------------", "using world size: ")
_VALUE = r"([^|\n]*)\|"  # the value with its spaces: float() takes them
_PREFIX = r"^(?:[^\n]*?" + printed_log.TIMESTAMP + r")?[^\n]*?iteration[ \t]+(\d+)/[ \t]*\d+[ \t]*\|"

# Field -> our tags. Every other field goes under import/.
TAGS = {
    "lm loss": (metrics.TRAIN_LOSS, metrics.TRAIN_LOSS_LM),
    "learning rate": (metrics.TRAIN_LR,),
    "grad norm": (metrics.TRAIN_GRAD_NORM,),
    "loss scale": (metrics.TRAIN_LOSS_SCALE,),
    "params norm": (metrics.TRAIN_PARAM_NORM,),
    "elapsed time per iteration (ms)": (metrics.PERF_STEP_TIME_MS,),
    "throughput per GPU (TFLOP/s/GPU)": (metrics.PERF_MODEL_TFLOPS,),
    "samples per second": (metrics.PERF_SAMPLES_PER_S,),  # Megatron-DeepSpeed: the job's samples per second
}
# Fields that are sums over the interval divided by its steps (the rest are the printed step's own).
_MEANS = frozenset(
    {
        "lm loss",
        "elapsed time per iteration (ms)",
        "throughput per GPU (TFLOP/s/GPU)",
        # Megatron-DeepSpeed's, from the interval's mean step time
        "samples per second",
        "tokens per gpu per second (tgs)",
        "TFLOPs",
    }
)
# Eval fields: "<loss> value" and "<loss> PPL" per loss name.
_EVAL = {("lm loss", "value"): metrics.EVAL_LOSS, ("lm loss", "PPL"): metrics.EVAL_PERPLEXITY}


def _split(text: str, pos: int, line: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``iteration N/ M | key: value | ...`` -> (keys, (timestamp, iteration, *values, "")); None for a
    line cut short (no closing ``|``) or without a single ``key: value``."""
    start = line.find("iteration")
    head = _HEAD.match(line, start)
    rest = line[head.end() :].rstrip() if head else ""
    if not head or not rest.endswith("|"):
        return None
    keys, texts = [], []
    for piece in rest[:-1].split("|"):
        key, colon, value = piece.partition(":")
        if colon:  # a piece without a colon is a note (MindSpeed-LLM: "fix-router ... is set, ...")
            keys.append(key.strip())
            texts.append(value)
    if not keys:
        return None
    return tuple(keys), (printed_log.timestamp_in(line[:start]), head.group(1), *texts, "")


def _compile(keys: tuple[str, ...]) -> re.Pattern[str]:
    fields = "".join(r"[ \t]*" + re.escape(key) + ":" + _VALUE for key in keys)
    return re.compile(_PREFIX + fields + r"[ \t]*()$", re.MULTILINE)


def _count(text: str) -> int:
    return len(_LOOKS.findall(text))


def _is_step_line(line: str) -> bool:
    return _LOOKS.search(line) is not None


def _interval(steps: list[int]) -> int:
    """The log interval: the most frequent gap between consecutive printed iterations (newer releases
    also print the first iteration, whose gap to the next is one less)."""
    gaps = Counter(printed_log.pairwise_gaps(steps))
    return gaps.most_common(1)[0][0] if gaps else 1


def _read(paths: list[Path], run: ImportedRun) -> None:
    table = printed_log.Table(_split, _compile)
    validation: list[tuple[int | None, re.Match[str]]] = []  # (last iteration before it, the line)
    previous: int | None = None  # the last iteration of the blocks before this one
    for text in table.read(paths, _count, _is_step_line):
        if "loss at" in text:
            for found in _VALIDATION.finditer(text):
                heads = _HEAD.findall(text, 0, found.start())
                validation.append((int(heads[-1][0]) if heads else previous, found))
        previous = int(table.blocks[-1][1][-1][1]) if table.blocks else None
    all_steps: list[int] = []
    for keys, columns in table.columns():
        stamps, steps = columns[0], list(map(int, columns[1]))
        all_steps.extend(steps)
        for key, texts in zip(keys, columns[2:-1], strict=True):
            _column(run, key, steps, texts)
        run.wall_times.update(printed_log.wall_times(steps, stamps))
    interval = _interval(all_steps)
    for tag in run.averaged_over:
        run.averaged_over[tag] = interval
    repeated = len(all_steps) - len(set(all_steps))
    if repeated:
        run.skipped.append(
            f"{repeated} iteration line(s) printed again for an iteration already printed (a resumed training "
            "in the same log?): the last line's values kept"
        )
    for before, found in validation:
        suffix, iteration, which, end_which, rest = found.groups()
        step = int(iteration) if iteration else before
        if step is not None:
            _validation(run, step, suffix, (which or end_which) == "test", rest)
    if table.bad:
        run.skipped.append(table.bad_lines_note("Megatron's iteration line"))


def _column(run: ImportedRun, key: str, steps: list[int], texts: tuple[str, ...]) -> None:
    values, not_numbers = printed_log.numbers(texts)
    if not_numbers:
        run.skipped.append(f"{not_numbers} value(s) of {key!r} that are not numbers")
    series = printed_log.series(steps, values, not_numbers)
    if not series:
        return
    largest = max(map(abs, series.values()))
    tags = TAGS.get(key) or (metrics.IMPORT_PREFIX + printed_log.import_name(key),)
    # any other "<name>: <x.xxxxxxE+yy>" field is a loss averaged like lm loss (total_loss_dict)
    averaged = key in _MEANS or ("E" in texts[0] and key not in TAGS)
    for tag in tags:
        _merge(run, tag, series if tag == tags[0] else dict(series))
        run.resolution[tag] = max(run.resolution.get(tag, 0.0), printed_log.resolution(texts[0], largest))
        if averaged:
            run.averaged_over[tag] = 1  # until the log interval is known, from every iteration printed


def _merge(run: ImportedRun, tag: str, series: dict[int, float]) -> None:
    """A block's points into the run's, later lines winning; a tag's first block is kept as it is."""
    if tag in run.scalars:
        run.scalars[tag].update(series)
    else:
        run.scalars[tag] = series


def _validation(run: ImportedRun, step: int, suffix: str, test: bool, rest: str) -> None:
    """``lm loss value: x | lm loss PPL: y | <other> value: ...`` -> eval/loss, eval/perplexity,
    eval/<other>; the test set's as eval/test_*, a named validation set's with its suffix."""
    for piece in rest.split("|"):
        key, colon, value = piece.partition(":")
        name, _, kind = key.strip().rpartition(" ")
        if not colon or kind not in ("value", "PPL"):
            continue
        try:
            found = float(value)
        except ValueError:
            run.skipped.append(f"validation at iteration {step}: {key.strip()!r} is not a number")
            continue
        tag = _EVAL.get((name, kind)) or metrics.EVAL_PREFIX + printed_log.import_name(
            name if kind == "value" else name + " perplexity"
        )
        if test or suffix:
            tail = tag.removeprefix(metrics.EVAL_PREFIX)
            tag = metrics.EVAL_PREFIX + printed_log.import_name(("test " if test else "") + tail + " " + suffix)
        run.add(tag, step, found)
        run.resolution.setdefault(tag, printed_log.resolution(value, abs(found)))


def read(paths: list[Path]) -> ImportedRun:
    """One log: a file and its rotated parts, oldest first. Megatron prints on one rank (the last)."""
    run = ImportedRun(source=list(paths), format=NAME)
    _read(paths, run)
    return run


def sniff(path: Path, head: bytes) -> bool:
    """An iteration line in the file's first bytes, or what Megatron prints before its first one (its
    arguments' banner, ``using world size: ...``): the first iteration line may come far later."""
    text = head.decode("utf-8", errors="replace")
    return _SNIFF.search(text) is not None or any(banner in text for banner in _BANNERS)


FORMAT = SourceFormat(
    NAME,
    "Megatron-LM's printed training log (training_log's 'iteration N/ M | key: value |' lines of every release; "
    "Megatron-DeepSpeed's and MindSpeed-LLM's variants)",
    sniff,
    read,
    rotated=True,
)
