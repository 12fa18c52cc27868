"""``mftb validate``: check the callbacks of MindFormers YAML configs before any rank starts."""

from __future__ import annotations

import argparse
import os
import tempfile

NAME = "validate"
HELP = "check the callbacks: block of MindFormers YAML configs (exit 0 valid, 1 problems, 2 unreadable)"
DESCRIPTION = (
    "Check the callbacks: and eval_callbacks: lists of each CONFIG: this package's callbacks against their "
    "schema (unknown keys, types, ranges, choices, cross-field rules, two monitors writing one run folder), "
    "other entries against MindFormers' callback registry. Every problem is listed with its YAML path and line; "
    "warnings flag legal but likely wrong settings; notes say where the runs will go. Exit status: 0 all valid, "
    "1 problems found, 2 a file could not be read or parsed (missing, empty, not text, YAML syntax error, "
    "callbacks not a list, an entry without type) or the team defaults file (MFTB_DEFAULTS) cannot be used. "
    "A training config is checked as a training gets it: completed from the team defaults file, with every "
    "option of our entries and where it comes from (the config's line, the defaults file's line, built in)."
)
# Framework packages it needs (checked by mftb before it runs).
FRAMEWORK = ("mindspore",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", metavar="CONFIG.yaml", help="MindFormers YAML config(s) to check")
    parser.add_argument(
        "--log-dirs",
        metavar="FILE",
        help="also write the folders the TensorBoard runs will go to, one per line, to FILE (for launchers)",
    )
    parser.add_argument(
        "--effective",
        action="store_true",
        help="list every option of our entries and where it comes from (printed anyway when the team defaults "
        "file, MFTB_DEFAULTS, gives some)",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from mindformers_tbplugin.config.checker import check_file
    from mindformers_tbplugin.config.report import quiet_output
    from mindformers_tbplugin.registration.catalog import our_callbacks

    worst = 0
    log_dirs: list[str] = []
    # Importing mindformers (if anything needs it) writes a log folder: keep it out of the working directory.
    with tempfile.TemporaryDirectory(prefix="mftb-validate-") as scratch:
        os.environ.setdefault("LOCAL_DEFAULT_PATH", scratch)
        with quiet_output():
            ours = our_callbacks()
        for config in args.configs:
            report = check_file(config, ours, effective=args.effective)
            print(report.render(), flush=True)
            worst = max(worst, report.exit_code)
            log_dirs += [str(folder) for folder in report.log_dirs if str(folder) not in log_dirs]
    if args.log_dirs:
        with open(args.log_dirs, "w", encoding="utf-8") as listing:
            listing.writelines(f"{folder}\n" for folder in log_dirs)
    return worst
