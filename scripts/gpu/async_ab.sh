#!/usr/bin/env bash
# Overlapped (asynchronous) scheduling against --no-async-scheduling, alternately on one
# machine (machines differ by ~3%): 128 and 32 concurrent sequences through the engine and
# batch-1 decode through the generator, Llama-3-8B shape, bf16; ROUNDS rounds (default 2).
# One line per run (scripts/gpu/summarize_async.py), the JSON in $OUT/async_ab.jsonl.
# Usage (repo root, after run_gpu.sh built build-gpu): bash scripts/gpu/async_ab.sh [ROUNDS]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${BUILD:-build-gpu}"
OUT="${OUT:-$ROOT/gpu-logs}"
ROUNDS="${1:-2}"
S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
SERVE="--prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-batched-tokens 8192"
declare -A CASES=(
  [serving_128]="--num-requests 128 --max-num-seqs 128 $SERVE"
  [serving_32]="--num-requests 32 --max-num-seqs 32 $SERVE"
  [decode_1]="--prompt-tokens 128 --gen-tokens 128 -r 3"
)
for r in $(seq 1 "$ROUNDS"); do
  for c in serving_128 decode_1 serving_32; do
    for mode in async sync; do
      extra=""
      [ "$mode" = sync ] && extra="--no-async-scheduling"
      res=$(timeout 150 $S ${CASES[$c]} $extra 2>/dev/null | tail -1)
      [ -n "$res" ] || res=null
      echo "{\"case\":\"$c\",\"mode\":\"$mode\",\"round\":$r,\"result\":$res}" >> "$OUT/async_ab.jsonl"
      python3 scripts/gpu/summarize_async.py --line "{\"case\":\"$c\",\"mode\":\"$mode\",\"round\":$r,\"result\":$res}"
    done
  done
done
