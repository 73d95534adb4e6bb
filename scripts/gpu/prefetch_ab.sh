#!/usr/bin/env bash
# The o projection's L2 prefetch during the decode attention (ABI 1.5 weight_prefetch,
# device option prefetch=) on and off, alternately on one machine (machines differ by ~3%),
# Llama-3-8B shape, bf16: 128 concurrent sequences with prefetch=off / on / last (the
# evict-last priority); 32 sequences and batch-1 decode with the prefetch forced on at any
# batch (prefetch_min_tokens=1) against off, to see where the default threshold belongs.
# ROUNDS rounds (default 2). One line per run (scripts/gpu/summarize_async.py), the JSON in
# $OUT/prefetch_ab.jsonl.
# Usage (repo root, after run_gpu.sh built build-gpu): bash scripts/gpu/prefetch_ab.sh [ROUNDS]
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
run() {  # case mode round env...
  local c=$1 mode=$2 r=$3
  shift 3
  local res
  res=$(env "$@" timeout 150 $S ${CASES[$c]} 2>/dev/null | tail -1)
  [ -n "$res" ] || res=null
  local line="{\"case\":\"$c\",\"mode\":\"$mode\",\"round\":$r,\"result\":$res}"
  echo "$line" >> "$OUT/prefetch_ab.jsonl"
  python3 scripts/gpu/summarize_async.py --line "$line"
}
for r in $(seq 1 "$ROUNDS"); do
  run serving_128 off "$r" STRATA_CUDA_PREFETCH=off
  run serving_128 on "$r" STRATA_CUDA_PREFETCH=on
  run serving_128 last "$r" STRATA_CUDA_PREFETCH=last
done
for r in $(seq 1 "$ROUNDS"); do
  for c in serving_32 decode_1; do
    run "$c" off "$r" STRATA_CUDA_PREFETCH=off
    run "$c" on_1 "$r" STRATA_CUDA_PREFETCH=on STRATA_CUDA_PREFETCH_MIN_TOKENS=1
  done
done
