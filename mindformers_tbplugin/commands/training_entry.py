"""``mftb train``: MindFormers' ``run_mindformer.py`` training entry, shipped with the plugin.

The mindformers wheel does not include ``run_mindformer.py``. This module does what its ``main``
does for training (config -> output path -> context -> Trainer), accepts the same options that
matter for training, and registers our classes first, so a bundled config runs without a MindFormers
source checkout, as a plain command or as the script ``msrun`` starts on every rank.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mindformers_tbplugin.commands.key_values import key_value, yaml_value
from mindformers_tbplugin.errors import UsageError

RUN_MODES = ("train", "finetune")


def str2bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "y", "on"):
        return True
    if lowered in ("false", "0", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def bool_or_name(text: str) -> Any:
    """``--resume_training`` takes true/false or the name of the checkpoint to resume from."""
    try:
        return str2bool(text)
    except argparse.ArgumentTypeError:
        return text


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="MindFormers YAML config (relative to the current directory)")
    parser.add_argument("--run_mode", choices=RUN_MODES, help="override run_mode")
    parser.add_argument("--output_dir", help="override output_dir (checkpoints, logs)")
    parser.add_argument("--train_dataset_dir", help="override train_dataset.data_loader.dataset_dir")
    parser.add_argument("--load_checkpoint", help="checkpoint file or folder to load")
    parser.add_argument(
        "--resume_training", type=bool_or_name, help="true/false, or the checkpoint name to resume from"
    )
    parser.add_argument("--src_strategy_path_or_dir", help="strategy of load_checkpoint (distributed checkpoints)")
    parser.add_argument("--auto_trans_ckpt", type=str2bool, help="transform load_checkpoint for this parallel layout")
    parser.add_argument("--use_parallel", type=str2bool, help="override use_parallel")
    parser.add_argument("--seed", type=int, help="override seed")
    parser.add_argument("--epochs", type=int, help="override runner_config.epochs")
    parser.add_argument("--batch_size", type=int, help="override runner_config.batch_size")
    parser.add_argument(
        "--gradient_accumulation_steps", type=int, help="override runner_config.gradient_accumulation_steps"
    )
    parser.add_argument("--sink_mode", type=str2bool, help="override runner_config.sink_mode")
    parser.add_argument("--num_samples", type=int, help="use only this many dataset samples")
    parser.add_argument("--do_eval", type=str2bool, help="evaluate during training")
    parser.add_argument("--eval_dataset_dir", help="override eval_dataset.data_loader.dataset_dir")
    parser.add_argument("--mode", type=int, choices=(0, 1), help="0: graph mode, 1: PyNative")
    parser.add_argument("--device_id", type=int, help="override context.device_id")
    parser.add_argument("--device_target", choices=("Ascend", "GPU", "CPU"), help="override context.device_target")
    parser.add_argument("--profile", type=str2bool, help="enable MindFormers' profiler")
    parser.add_argument(
        "--register_path",
        help="folder of modules for MindFormers' auto_register (sets REGISTER_PATH and sys.path)",
    )
    parser.add_argument(
        "--options", nargs="+", metavar="KEY=VALUE", help="override config keys, e.g. runner_config.epochs=2"
    )


_SIMPLE_OVERRIDES = {
    "run_mode": "run_mode",
    "output_dir": "output_dir",
    "load_checkpoint": "load_checkpoint",
    "resume_training": "resume_training",
    "src_strategy_path_or_dir": "src_strategy_path_or_dir",
    "auto_trans_ckpt": "auto_trans_ckpt",
    "use_parallel": "use_parallel",
    "seed": "seed",
    "do_eval": "do_eval",
    "profile": "profile",
    "epochs": "runner_config.epochs",
    "batch_size": "runner_config.batch_size",
    "gradient_accumulation_steps": "runner_config.gradient_accumulation_steps",
    "sink_mode": "runner_config.sink_mode",
    "mode": "context.mode",
    "device_id": "context.device_id",
    "device_target": "context.device_target",
    "train_dataset_dir": "train_dataset.data_loader.dataset_dir",
    "eval_dataset_dir": "eval_dataset.data_loader.dataset_dir",
    "num_samples": "train_dataset.data_loader.num_samples",
}


def overrides_from_args(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """Dotted-key overrides from the options given (``--key.sub value`` pairs included)."""
    overrides = {key: getattr(args, name) for name, key in _SIMPLE_OVERRIDES.items() if getattr(args, name) is not None}
    for item in args.options or []:
        key, value = key_value(item, "--options")
        overrides[key] = value
    pairs = [part for item in extra for part in item.split("=", 1)]
    if len(pairs) % 2:
        raise UsageError(f"config overrides must come as '--key value' pairs, got {' '.join(extra)!r}")
    for key, value in zip(pairs[::2], pairs[1::2], strict=False):
        if not key.startswith("--"):
            raise UsageError(f"config override keys start with '--', got {key!r}")
        overrides[key[2:]] = yaml_value(value)
    return overrides


def apply_overrides(config: Any, overrides: dict[str, Any]) -> None:
    """Set dotted keys; a numeric part indexes a list (``callbacks.1.log_dir``)."""
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = config
        for name in parents:
            if isinstance(node, list):
                node = _list_item(node, name, dotted)
                continue
            if node.get(name) is None:
                node[name] = type(config)()
            node = node[name]
        if isinstance(node, list):
            node[_list_index(node, leaf, dotted)] = value
        else:
            node[leaf] = value


def _list_index(items: list, name: str, dotted: str) -> int:
    if not name.isdigit() or int(name) >= len(items):
        raise UsageError(f"override {dotted!r}: {name!r} is not an index of a list of {len(items)} items")
    return int(name)


def _list_item(items: list, name: str, dotted: str) -> Any:
    return items[_list_index(items, name, dotted)]


def set_register_path(path: str) -> None:
    folder = os.path.abspath(path)
    os.environ["REGISTER_PATH"] = folder
    if folder not in sys.path:
        sys.path.append(folder)


def run(args: argparse.Namespace, extra: list[str]) -> None:
    """Train as run_mindformer.py does. Raises UsageError or ConfigError for user mistakes."""
    config_path = Path(args.config).expanduser().resolve()
    if not config_path.is_file():
        raise UsageError(f"config file not found: {config_path}")
    overrides = overrides_from_args(args, extra)
    if args.register_path:
        set_register_path(args.register_path)

    import mindformers_tbplugin.registration.mindformers_registry  # noqa: F401  (our callbacks and wrapper, before the Trainer)
    from mindformers_tbplugin.framework.mindformers_api import resolve

    # run_mode as run_mindformer.py passes it: loading sees the mode it trains in (the team defaults do)
    config = resolve("MindFormerConfig")(str(config_path), **{k: v for k, v in overrides.items() if k == "run_mode"})
    apply_overrides(config, overrides)
    if config.get("run_mode") not in RUN_MODES:
        raise UsageError(
            f"run_mode must be one of {', '.join(RUN_MODES)} for mftb train, got {config.get('run_mode')!r}"
        )
    resolve("set_output_path")(config.output_dir)
    resolve("build_context")(config)
    resolve("Trainer")(config).train()
