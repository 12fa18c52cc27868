"""``mftb make-data``: write a synthetic MindRecord dataset for tiny CPU runs."""

from __future__ import annotations

import argparse

NAME = "make-data"
HELP = "write a synthetic MindRecord dataset for tiny CPU runs"
DESCRIPTION = (
    "Write learnable synthetic token sequences (input_ids, int32, length seq_length+1) as a MindRecord "
    "file, for the tiny configs."
)
# Framework packages it needs (checked by mftb before it runs).
FRAMEWORK = ("mindspore",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", default="./output/data/tiny.mindrecord", help="file to write (default: %(default)s)"
    )
    parser.add_argument("--num_samples", type=int, default=128, help="number of sequences (default: %(default)s)")
    parser.add_argument("--seq_length", type=int, default=32, help="model sequence length (default: %(default)s)")
    parser.add_argument("--vocab_size", type=int, default=256, help="vocabulary size (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    parser.add_argument(
        "--labels",
        action="store_true",
        help="write input_ids, labels (one token apart) and loss_mask of seq_length tokens: the columns of "
        "mcore models (use_legacy: False), which do not shift input_ids themselves",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.framework.synthetic_data import write_mindrecord

    for name in ("num_samples", "seq_length", "vocab_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    path = write_mindrecord(args.output, args.num_samples, args.seq_length, args.vocab_size, args.seed, args.labels)
    if args.labels:
        columns = f"input_ids, labels and loss_mask ({args.seq_length} tokens)"
        print(f"wrote {args.num_samples} samples of {columns} to {path}")
    else:
        print(f"wrote {args.num_samples} samples of {args.seq_length + 1} token ids to {path}")
    return 0
