#!/usr/bin/env python
"""Train a MindFormers mcore model (use_legacy: False) on a CPU: installs the CPU stand-ins of
mcore_cpu_patch.py, then runs `mftb train` with the same arguments, or MindFormers' own
run_mindformer.py with --entry. For the tests and `make demo-moe`; usable as msrun's script (every
rank installs the stand-ins itself).

    python scripts/cpu/train_mcore.py --config X.yaml [mftb train options]
    python scripts/cpu/train_mcore.py --entry path/to/run_mindformer.py --config X.yaml [its options]
"""

import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# MindSpore first: it must load its protobuf before anything else does.
import mindspore  # noqa: F401, I001
import mcore_cpu_patch

args = sys.argv[1:]
entry = None
if args[:1] == ["--entry"]:
    entry, args = args[1], args[2:]
mcore_cpu_patch.apply()
if entry is None:  # `python -m mindformers_tbplugin train ...` is `mftb train ...`
    sys.argv = ["mftb", "train", *args]
    runpy.run_module("mindformers_tbplugin", run_name="__main__", alter_sys=True)
    sys.exit(0)
entry = os.path.abspath(entry)
sys.path.insert(0, os.path.dirname(entry))
sys.argv = [entry, *args]
runpy.run_path(entry, run_name="__main__")
