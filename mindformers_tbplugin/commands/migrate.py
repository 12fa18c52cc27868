"""``mftb migrate``: rewrite a config's MindFormers ``tensorboard:`` or ``monitor.tensorboard`` section,
``type: TensorBoard`` and SummaryCollector entries as TensorBoardMonitor (+ HistogramMonitor) entries."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "migrate"
HELP = (
    "rewrite a config's tensorboard: or monitor.tensorboard section, type: TensorBoard or SummaryCollector entries "
    "as TensorBoardMonitor"
)
DESCRIPTION = (
    "Rewrite CONFIG so that TensorBoardMonitor (+ HistogramMonitor) entries do what MindFormers' built-in "
    "tensorboard: section (monitor.tensorboard in master's PyNative trainer), a type: TensorBoard entry or a "
    "SummaryCollector entry (summary_collector:, "
    "SummaryCollector, SummaryMonitor) did: every option with an equivalent is carried over, the others are "
    "listed. Only the migrated lines change; comments, key order and formatting elsewhere stay as they are. "
    "Without -o or --in-place, prints a unified diff (stdout) and the listing (stderr) and writes nothing."
)
# Framework packages it needs: none, it only reads and writes YAML.
FRAMEWORK: tuple[str, ...] = ()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG", help="the MindFormers YAML config to migrate")
    parser.add_argument("-o", "--output", metavar="OUT", help="write the migrated config to OUT")
    parser.add_argument("--in-place", action="store_true", help="rewrite CONFIG itself")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.config.migration import migrate_file
    from mindformers_tbplugin.config.yaml_edits import write_text
    from mindformers_tbplugin.errors import UsageError

    if args.output and args.in_place:
        raise UsageError("give either -o OUT or --in-place, not both")
    migration = migrate_file(args.config)
    target = Path(args.config) if args.in_place else Path(args.output) if args.output else None
    if target is None:
        sys.stdout.write(migration.diff())
        print(migration.render(), file=sys.stderr)
        return 0
    write_text(target, migration.text)
    print(migration.render())
    print(f"wrote {target}; check it with: mftb validate {target}")
    return 0
