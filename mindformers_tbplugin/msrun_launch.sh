#!/usr/bin/env bash
# Launch a MindFormers training on one node of a (possibly multi-node) msrun job.
#
#   scripts/msrun_launch.sh --config CONFIG --worker_num N [--local_worker_num N] [--node_rank R]
#       [--master_addr A] [--master_port P] [--output_dir D] [--entry "mftb train" | path/to/run_mindformer.py]
#       [-- extra arguments for the entry]
#
# - validates the config (mftb validate) before any rank starts;
# - puts the Python environment's bin first on PATH (msrun starts `python` from PATH);
# - routes each rank's stdout/stderr to <output_dir>/msrun_log/<node_rank>/worker_<rank>.log and the
#   TensorBoard runs of monitors that set no log_dir to <output_dir>/tensorboard (MFTB_LOG_DIR);
#   a log_dir written in the YAML wins (relative ones resolve against the folder you launch from);
# - exits non-zero when a rank fails, naming the rank and showing the tail of its log; exits 3 (as
#   mftb train does) when an AlertMonitor rule with action: stop ended the job, naming the rule.
# Run it once per node with the same --output_dir on shared storage and --node_rank 0..nodes-1.
set -euo pipefail

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
die() { echo "msrun_launch: error: $*" >&2; exit 2; }

config="" worker_num="" local_worker_num="" node_rank=0 master_addr=127.0.0.1 master_port=8118
output_dir=./output entry="mftb train"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) config="${2:?}"; shift 2 ;;
    --worker_num) worker_num="${2:?}"; shift 2 ;;
    --local_worker_num) local_worker_num="${2:?}"; shift 2 ;;
    --node_rank) node_rank="${2:?}"; shift 2 ;;
    --master_addr) master_addr="${2:?}"; shift 2 ;;
    --master_port) master_port="${2:?}"; shift 2 ;;
    --output_dir) output_dir="${2:?}"; shift 2 ;;
    --entry) entry="${2:?}"; shift 2 ;;
    -h|--help) usage ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ -n "$config" ]] || die "--config is required"
[[ -n "$worker_num" ]] || die "--worker_num is required"
local_worker_num="${local_worker_num:-$worker_num}"
for pair in "worker_num:$worker_num" "local_worker_num:$local_worker_num" "node_rank:$node_rank" \
            "master_port:$master_port"; do
  [[ "${pair#*:}" =~ ^[0-9]+$ ]] || die "--${pair%%:*} must be a non-negative integer, got '${pair#*:}'"
done
(( worker_num >= 1 && local_worker_num >= 1 && local_worker_num <= worker_num )) ||
  die "need 1 <= --local_worker_num ($local_worker_num) <= --worker_num ($worker_num)"
[[ -f "$config" ]] || die "config file not found: $config"

# The environment that has the plugin: the one whose mftb is on PATH (the active one), else the
# repository's .venv (make demo / make test).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if mftb_path="$(command -v mftb)"; then
  env_bin="$(cd "$(dirname "$mftb_path")" && pwd)"
elif [[ -x "$here/../.venv/bin/mftb" ]]; then
  env_bin="$(cd "$here/../.venv/bin" && pwd)"
else
  die "mftb not found: activate the environment where mindformers-tbplugin is installed"
fi
export PATH="$env_bin:$PATH"

output_dir="$(realpath -m -- "$output_dir")"
export MFTB_LOG_DIR="$output_dir/tensorboard"
# Where each rank runs and logs, for the per-rank records' layout (TensorBoardMonitor rank_records).
export MFTB_NODE_RANK="$node_rank" MFTB_WORKER_LOGS="$output_dir/msrun_log"
# The folders the runs will really go to, as mftb validate resolves them (YAML log_dir, else MFTB_LOG_DIR).
tb_listing="$(mktemp)"
trap 'rm -f "$tb_listing"' EXIT
"$env_bin/mftb" validate --log-dirs "$tb_listing" "$config" ||
  { echo "msrun_launch: stopped by mftb validate (above); no rank was started" >&2; exit 2; }
mapfile -t tb_dirs < "$tb_listing"
tb_runs="TensorBoard runs in ${tb_dirs[*]:-(no TensorBoardMonitor in the config)}"

config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
log_dir="$output_dir/msrun_log/$node_rank"
mkdir -p "$log_dir"

case "$entry" in
  "mftb train") script=("$env_bin/mftb" train) ;;
  *.py) [[ -f "$entry" ]] || die "entry script not found: $entry"; script=("$entry") ;;
  *) die "--entry must be \"mftb train\" or a path to run_mindformer.py, got '$entry'" ;;
esac

echo "msrun_launch: node $node_rank, $local_worker_num of $worker_num workers, logs in $log_dir, $tb_runs"
status=0
msrun --worker_num="$worker_num" --local_worker_num="$local_worker_num" --node_rank="$node_rank" \
  --master_addr="$master_addr" --master_port="$master_port" --log_dir="$log_dir" --join=True \
  "${script[@]}" --config "$config" --output_dir "$output_dir" "${extra[@]}" || status=$?

if (( status != 0 )); then
  failed=() stops=()
  for log in "$log_dir"/worker_*.log; do
    [[ -e "$log" ]] || continue
    if grep -q -E "Traceback \(most recent call last\)|^[A-Za-z]*Error:" "$log"; then
      failed+=("$log")
    elif grep -q -E "^[^:]+: stopped by AlertMonitor \(" "$log"; then
      stops+=("$log")
    fi
  done
  if (( ${#failed[@]} == 0 && ${#stops[@]} > 0 )); then
    # Every rank exited with the alert status 3 (mftb train, or any entry through the plugin's exit
    # handler); the rank that writes the main run names the rule, the others say "an alert on rank R".
    stop_log="${stops[0]}"
    for log in "${stops[@]}"; do
      grep -q ": stopped by AlertMonitor (an alert on rank " "$log" || { stop_log="$log"; break; }
    done
    line="$(grep -m 1 -o -E "^[^:]+: stopped by AlertMonitor \(.*" "$stop_log")"
    line="${line#*: }"
    rank="$(basename "$stop_log" .log)"; rank="${rank#worker_}"
    echo "msrun_launch: the job was ${line%%; exit status*} (rank $rank's log: $stop_log); $tb_runs" >&2
    exit 3
  fi
  ((${#failed[@]})) || failed=("$log_dir"/worker_*.log)
  for log in "${failed[@]}"; do
    [[ -e "$log" ]] || continue
    rank="$(basename "$log" .log)"; rank="${rank#worker_}"
    echo "msrun_launch: rank $rank failed; last lines of $log:" >&2
    tail -n 20 "$log" >&2
  done
  exit "$status"
fi
echo "msrun_launch: done; $tb_runs"
