"""Child process writing one run folder with RunWriter, for `mftb doctor` tests.

argv: RUN_DIR FIRST LAST SECONDS_PER_STEP MODE   (MODE: close | hold)
Writes steps FIRST..LAST of train/loss, SECONDS_PER_STEP apart, flushing as it goes. `close` closes the
file and exits; `hold` prints "ready" and keeps the file open until killed.
"""

import sys
import time

from mindformers_tbplugin.tfevents.writer import RunWriter

run_dir, first, last, pause, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
writer = RunWriter(run_dir, flush_secs=0.1)
for step in range(first, last + 1):
    writer.add_scalars(step, {"train/loss": 1.0 / step})
    time.sleep(pause)
writer.flush()
if mode == "hold":
    print("ready", flush=True)
    time.sleep(300)
writer.close()
