"""``mftb compare``: does a run match its baseline, per tag and as one verdict (a CI golden-curve check)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAME = "compare"
HELP = "compare a run with its baseline: per-tag errors and a verdict (exit 0 pass, 1 fail, 2 unusable input)"
DESCRIPTION = (
    "Compare RUN with BASELINE, each a run folder (TensorBoardMonitor's or any TensorBoard folder) or any source "
    "mftb import reads (MindFormers' or Megatron-LM's printed log, MindSpore summary files, a Hugging Face "
    "trainer_state.json). Steps are matched by global step; a baseline value that is a mean over a log interval "
    "is compared with the run's mean over the same steps. Per tag (train/loss, and train/grad_norm, train/lr "
    "when both runs have them): first-step, mean and largest absolute and relative errors, the first divergent "
    "step, and a verdict against the criteria (by default MindFormers' migration standard). Exit status: 0 "
    "pass, 1 fail, 2 input that cannot be compared (the reason is printed)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mindformers_tbplugin.alignment.criteria import BUILTIN
    from mindformers_tbplugin.alignment.x_axis import AXES

    parser.add_argument("run", metavar="RUN", help="the run: a run folder or an import source")
    parser.add_argument("baseline", metavar="BASELINE", help="the baseline: a run folder or an import source")
    parser.add_argument(
        "--tags", help="comma-separated tags to compare (default: train/loss, plus train/grad_norm, train/lr)"
    )
    parser.add_argument(
        "--criteria",
        default="mindformers",
        metavar="NAME|FILE",
        help=f"built-in criteria ({', '.join(BUILTIN)}; default mindformers) or a YAML file of tolerances",
    )
    parser.add_argument(
        "--noise",
        metavar="BASELINE2",
        help="the baseline run again without determinism: its spread relaxes the criteria to the baseline's own",
    )
    parser.add_argument("--strict", action="store_true", help="fail when the criteria's step-count rule is not met")
    parser.add_argument(
        "--x", choices=AXES, default="steps", help="compare along global steps (default) or samples or tokens consumed"
    )
    parser.add_argument("--json", metavar="PATH|-", help="write the result as JSON to PATH, or to stdout with -")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown report to paste into a review")


def _read(label: str, source: str, notes: list[str]):  # -> ImportedRun
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.imports.detect import read_source

    path = Path(source).expanduser()
    if not path.exists():
        raise UsageError(f"{label} {source}: no such file or folder")
    run = read_source([path])
    if not run.scalars:
        raise UsageError(f"{label} {source}: no scalar read from it ({run.format})")
    said = [*run.notes, *run.skipped, *([f"stopped at {run.stopped_at}"] if run.stopped_at else [])]
    notes.extend(f"{label} ({run.format}): {note}" for note in said)
    return run


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.alignment.criteria import load_criteria
    from mindformers_tbplugin.alignment.report import as_json, as_text
    from mindformers_tbplugin.alignment.run_comparison import compare_runs
    from mindformers_tbplugin.imports.collector_pause import collector_paused

    criteria = load_criteria(args.criteria)
    tags = [tag.strip() for tag in args.tags.split(",") if tag.strip()] if args.tags else None
    notes: list[str] = []
    with collector_paused():
        result = compare_runs(
            _read("RUN", args.run, notes),
            _read("BASELINE", args.baseline, notes),
            criteria,
            tags=tags,
            noise=_read("BASELINE2", args.noise, notes) if args.noise else None,
            strict=args.strict,
            axis=args.x,
        )
    result.notes[:0] = notes
    document = json.dumps(as_json(result, args.run, args.baseline), indent=2)
    if args.json == "-":
        print(document)
    else:
        if args.json:
            Path(args.json).expanduser().write_text(document + "\n", encoding="utf-8")
        sys.stdout.write(as_text(result, args.run, args.baseline, markdown=args.markdown))
    return 0 if result.verdict == "pass" else 1
