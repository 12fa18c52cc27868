"""Child process writing one run folder with RunWriter, for `mftb doctor` tests.

argv: RUN_DIR FIRST LAST MODE [TOGETHER]   (MODE: close | hold)
Writes steps FIRST..LAST of train/loss, flushing as it goes. With TOGETHER=N it writes FIRST, waits until
RUN_DIR holds N event files (N processes have each written a step), then writes the rest: the files' time
spans overlap. `close` closes the file and exits; `hold` prints "ready" and keeps the file open until killed.
"""

import sys
import time
from pathlib import Path

from mindformers_tbplugin.tfevents.writer import RunWriter

run_dir, first, last, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
together = int(sys.argv[5]) if len(sys.argv) > 5 else 0
writer = RunWriter(run_dir, flush_secs=0.1)
for step in range(first, last + 1):
    writer.add_scalars(step, {"train/loss": 1.0 / step})
    if step == first and together:
        writer.flush()
        while len(list(Path(run_dir).glob("*tfevents*"))) < together:
            time.sleep(0.05)
writer.flush()
if mode == "hold":
    print("ready", flush=True)
    time.sleep(300)  # until the test kills it
writer.close()
