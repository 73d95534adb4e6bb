#!/usr/bin/env bash
# cuBLASLt configurations found by bench/cuda/gemm_search against the heuristic's first
# choice, in the serving benchmark: the search writes a table for the decode-batch token
# counts TOKENS (default 128) of the Llama-3-8B shape's four products, then the engine runs
# 128 (and 32) concurrent sequences with the table (device option gemm_configs=, through
# STRATA_CUDA_GEMM_CONFIGS) and without, alternately on one machine; ROUNDS rounds (default
# 2). One line per run (scripts/gpu/summarize_async.py), the JSON in $OUT/gemm_configs_ab.jsonl,
# the table in $OUT/gemm_configs.txt.
# Usage (repo root, after run_gpu.sh built build-gpu): bash scripts/gpu/gemm_configs_ab.sh [ROUNDS] [TOKENS]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${BUILD:-build-gpu}"
OUT="${OUT:-$ROOT/gpu-logs}"
ROUNDS="${1:-2}"
TOKENS="${2:-128}"
TABLE="$OUT/gemm_configs.txt"
rm -f "$TABLE"
timeout 400 "$BUILD/bin/gemm_search" --tokens "$TOKENS" --write "$TABLE" | tee "$OUT/gemm_search.jsonl" | \
  python3 -c 'import json,sys
for l in sys.stdin:
    r = json.loads(l)
    print("%-8s n=%-4d heuristic %.2f us (%.3f)  best %.2f us (%.3f)  %s" % (r["shape"], r["tokens"], r["heuristic_us"],
          r["heuristic_bw_fraction"], r["best_us"], r["best_bw_fraction"], r["top"][0]["config"]))'
S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
SERVE="--prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-batched-tokens 8192"
run() {  # case mode round sequences env...
  local c=$1 mode=$2 r=$3 seqs=$4
  shift 4
  local res
  res=$(env "$@" timeout 150 $S --num-requests "$seqs" --max-num-seqs "$seqs" $SERVE 2>/dev/null | tail -1)
  [ -n "$res" ] || res=null
  local line="{\"case\":\"$c\",\"mode\":\"$mode\",\"round\":$r,\"result\":$res}"
  echo "$line" >> "$OUT/gemm_configs_ab.jsonl"
  python3 scripts/gpu/summarize_async.py --line "$line"
}
for r in $(seq 1 "$ROUNDS"); do
  run serving_128 table "$r" 128 STRATA_CUDA_GEMM_CONFIGS="$TABLE"
  run serving_128 heur "$r" 128 STRATA_CUDA_GEMM_CONFIGS=
done
if [[ ",$TOKENS," == *",32,"* ]]; then
  for r in $(seq 1 "$ROUNDS"); do
    run serving_32 table "$r" 32 STRATA_CUDA_GEMM_CONFIGS="$TABLE"
    run serving_32 heur "$r" 32 STRATA_CUDA_GEMM_CONFIGS=
  done
fi
python3 scripts/gpu/summarize_async.py "$OUT/gemm_configs_ab.jsonl"
