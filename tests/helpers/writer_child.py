"""Child process for writer lifecycle tests.

argv: RUN_DIR MODE N   (MODE: sigterm | exit | raise)
Writes N scalar points with a one-hour flush interval (so only closing puts them on disk), prints
"ready", then waits for SIGTERM, exits normally, or dies of an uncaught exception.
"""

import sys
import time

from mindformers_tbplugin.tfevents.registry import get_writer

run_dir, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
writer = get_writer(run_dir, flush_secs=3600)
for step in range(1, count + 1):
    writer.add_scalars(step, {"train/loss": 1.0 / step})
print("ready", flush=True)
if mode == "sigterm":
    time.sleep(120)
elif mode == "raise":
    raise RuntimeError("training blew up")
