"""``mftb``: the command line, thin over the modules that do the work."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mindformers_tbplugin import __version__

REGISTER_FOLDER = Path(__file__).resolve().parent / "register_path"


def _cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin import train

    train.run(args, extra)
    return 0


def _cmd_make_data(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.synthetic_data import write_mindrecord

    path = write_mindrecord(args.output, args.num_samples, args.seq_length, args.vocab_size, args.seed)
    print(f"wrote {args.num_samples} samples of {args.seq_length + 1} token ids to {path}")
    return 0


def _cmd_register_path(args: argparse.Namespace, extra: list[str]) -> int:
    print(REGISTER_FOLDER)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mftb", description="TensorBoard monitoring for MindFormers training.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train_parser = commands.add_parser(
        "train",
        help="train with a MindFormers YAML config (run_mindformer.py's training entry)",
        description="Train with a MindFormers YAML config, as run_mindformer.py does. Unknown "
        "'--key.sub value' pairs override config keys. Usable as the script msrun starts.",
    )
    from mindformers_tbplugin.train import add_train_arguments

    add_train_arguments(train_parser)
    train_parser.set_defaults(handler=_cmd_train, accepts_extra=True)

    data_parser = commands.add_parser(
        "make-data",
        help="write a synthetic MindRecord dataset for tiny CPU runs",
        description="Write learnable synthetic token sequences (input_ids, int32, length seq_length+1) "
        "as a MindRecord file, for the tiny configs.",
    )
    data_parser.add_argument(
        "--output", default="./output/data/tiny.mindrecord", help="file to write (default: %(default)s)"
    )
    data_parser.add_argument("--num_samples", type=int, default=128, help="number of sequences (default: %(default)s)")
    data_parser.add_argument("--seq_length", type=int, default=32, help="model sequence length (default: %(default)s)")
    data_parser.add_argument("--vocab_size", type=int, default=256, help="vocabulary size (default: %(default)s)")
    data_parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    data_parser.set_defaults(handler=_cmd_make_data)

    register_parser = commands.add_parser(
        "register-path",
        help="print the folder to use as REGISTER_PATH for MindFormers' auto_register route",
        description="Print the folder holding mftb_register.py. Use it as REGISTER_PATH (or "
        "run_mindformer.py --register_path) with 'auto_register: mftb_register.TensorBoardMonitor' "
        "in the callback entry.",
    )
    register_parser.set_defaults(handler=_cmd_register_path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from mindformers_tbplugin.schema import ConfigError
    from mindformers_tbplugin.train import UsageError

    try:
        return args.handler(args, extra)
    except (UsageError, ConfigError) as exc:
        # User mistakes (missing file, bad override, invalid callback config): message, no traceback.
        print(f"mftb {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
