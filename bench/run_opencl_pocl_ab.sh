#!/usr/bin/env bash
# The issue-29 PoCL figure: the 110M W8A8 decode step through the CPU backend and through
# the OpenCL backend on PoCL, alternating in the same run (ROUNDS rounds, default 3), with
# the load average before each run; extra plugins (e.g. an older OpenCL build to compare)
# join the alternation: bench/run_opencl_pocl_ab.sh [PLUGIN...]
# Prints one line per run: round, load average (1 min), plugin path, the bench's JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${STRATA_BIN:-build/bin}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-20}
plugins=("$BIN/libstrata-backend-cpu.so" "$BIN/libstrata-backend-opencl.so" "$@")
for r in $(seq 1 "$ROUNDS"); do
  for p in "${plugins[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    json=$("$BIN/decode_step_bench" --plugin "$p" --shape llama-110m --format w8a8 --mode decode --batch 1 \
      --context 128 --reps "$REPS")
    echo "round $r load $load $p $json"
  done
done
