"""``mftb watch LOGDIR``: alert rules over any TensorBoard logs, once (for cron) or following them."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

NAME = "watch"
HELP = "apply alert rules to the TensorBoard runs under a folder (any writer), once or continuously"
DESCRIPTION = (
    "Read the scalar points of every run under LOGDIR and apply alert rules (the same as AlertMonitor's, "
    "plus 'stall'). Alerts are printed and sent to the configured sinks. With --once: exit 1 if any "
    "alert fired, else 0. Without: keep reading what is appended every --interval seconds."
)
WATCH_ONLY_SINKS = ("log", "tensorboard")  # alerts are printed; there is no training to write into


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", nargs="?", help="folder holding the runs (searched recursively)")
    parser.add_argument(
        "--config",
        help="YAML file with 'rules:' and 'sinks:' lists, or a MindFormers config with an AlertMonitor callback",
    )
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="SPEC",
        help="a rule as NAME[,param=value...], e.g. 'spike,tag=train/loss,k=6' (repeatable)",
    )
    parser.add_argument("--jsonl", action="append", default=[], metavar="PATH", help="also append alerts to PATH")
    parser.add_argument("--webhook", action="append", default=[], metavar="URL", help="also POST alerts to URL")
    parser.add_argument(
        "--tensorboard-url",
        metavar="URL",
        help="the team's TensorBoard, for a link to the run in chat and mail alerts (default: $MFTB_TENSORBOARD_URL)",
    )
    parser.add_argument("--once", action="store_true", help="scan once; exit 1 if any alert fired, else 0")
    parser.add_argument(
        "--interval", type=float, default=10.0, help="seconds between reads when following (default: %(default)s)"
    )
    parser.add_argument("--list-rules", action="store_true", help="print every rule with its parameters and exit")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.alerts.alert_text import tensorboard_url
    from mindformers_tbplugin.alerts.engine import DEFAULT_RULES, build_rules, describe_rules
    from mindformers_tbplugin.alerts.record import Alert
    from mindformers_tbplugin.alerts.sinks import Dispatcher, build_sinks, format_alert, usable_sinks
    from mindformers_tbplugin.alerts.watcher import Watcher
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.schema import ConfigError

    if args.list_rules:
        print(describe_rules())
        return 0
    if not args.logdir:
        raise UsageError("give the folder to watch: mftb watch LOGDIR")
    logdir = Path(args.logdir)
    if not logdir.is_dir():
        raise UsageError(f"{logdir} is not a folder")
    if args.interval <= 0:
        raise UsageError(f"--interval must be a positive number of seconds, got {args.interval}")

    rule_specs, sink_specs, link = _load_config(Path(args.config)) if args.config else ([], [], None)
    flag_rules = _rules_from_flags(args.rule)
    _, problems = build_rules(flag_rules, "--rule", watcher=True)
    if problems:
        raise ConfigError("invalid --rule:\n" + "\n".join(f"  - {p.render()}" for p in problems), problems)
    rule_specs += flag_rules
    if not rule_specs:  # stall is opt-in: a run that ended normally looks just like a stalled one
        rule_specs = list(DEFAULT_RULES)
    sink_specs += [{"jsonl": path} for path in args.jsonl] + [{"webhook": url} for url in args.webhook]
    if "tensorboard" in sink_specs:
        print(
            "mftb watch: the tensorboard sink works only inside training; alerts are printed instead", file=sys.stderr
        )
    link = tensorboard_url(args.tensorboard_url or link)
    built, problems = build_sinks([s for s in sink_specs if s not in WATCH_ONLY_SINKS], "--webhook/--jsonl", link)
    if problems:
        raise ConfigError("invalid sink:\n" + "\n".join(f"  - {p.message}" for p in problems), problems)
    dispatcher = Dispatcher(usable_sinks(built))

    def report(alert: Alert) -> None:
        print(format_alert(alert), flush=True)
        dispatcher.dispatch(alert)

    watcher = Watcher(logdir, rule_specs, report)
    try:
        if args.once:
            watcher.poll()
            watcher.check_stall()
            print(
                f"mftb watch: {watcher.points_read} points in {len(watcher.runs)} runs, {watcher.alerts_fired} alerts",
                file=sys.stderr,
            )
            return 1 if watcher.alerts_fired else 0
        while True:
            watcher.poll()
            watcher.check_stall()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    finally:
        dispatcher.close()


def _rules_from_flags(flags: list[str]) -> list[dict[str, Any]]:
    """``'spike,tag=train/loss,k=6'`` -> ``{rule: spike, tag: train/loss, k: 6}`` (values read as YAML)."""
    from mindformers_tbplugin.commands.key_values import key_value

    specs = []
    for flag in flags:
        name, *pairs = flag.split(",")
        spec: dict[str, Any] = {"rule": name.strip()}
        spec.update(key_value(pair, f"--rule {flag!r}", "NAME,param=value,...") for pair in pairs)
        specs.append(spec)
    return specs


def _load_config(path: Path) -> tuple[list[Any], list[Any], str | None]:
    """The ``rules`` and ``sinks`` lists of ``path`` and its ``tensorboard_url``, validated; problems name the
    file, line and YAML path."""
    import yaml

    from mindformers_tbplugin.alerts.engine import build_rules
    from mindformers_tbplugin.alerts.sinks import build_sinks
    from mindformers_tbplugin.errors import UsageError
    from mindformers_tbplugin.schema import ConfigError
    from mindformers_tbplugin.yaml_lines import line_of
    from mindformers_tbplugin.yaml_lines import load as load_with_nodes

    try:
        data, root = load_with_nodes(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML: {exc}") from exc
    prefix, section = "", data if isinstance(data, dict) else {}
    if isinstance(section.get("callbacks"), list):  # a MindFormers config: use its AlertMonitor entry
        for index, entry in enumerate(section["callbacks"]):
            if isinstance(entry, dict) and entry.get("type") == "AlertMonitor":
                prefix, section = f"callbacks[{index}].", entry
                break
        else:
            raise UsageError(f"{path}: no 'type: AlertMonitor' entry in 'callbacks:'")
    if "rules" not in section and "sinks" not in section:
        raise UsageError(f"{path}: expected a 'rules:' list (and optionally 'sinks:')")
    rule_specs = section.get("rules") or []
    sink_specs = section.get("sinks") or []
    _, problems = build_rules(rule_specs, f"{prefix}rules", watcher=True)
    _, sink_problems = build_sinks(sink_specs, f"{prefix}sinks")
    problems += sink_problems
    if problems:
        lines = [f"  - {path}:{line_of(root, p.key) or 1}: {p.render()}" for p in problems]
        raise ConfigError(f"invalid alert configuration in {path}:\n" + "\n".join(lines), problems)
    link = section.get("tensorboard_url")
    return list(rule_specs), list(sink_specs), link if isinstance(link, str) else None
