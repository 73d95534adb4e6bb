#!/usr/bin/env bash
# CPU benchmarks recorded in docs/benchmarks.md: memory bandwidth (the decode floor), then
# `strata bench` on stories260K and on a random-weight 110M Llama shape in f32 and bf16.
# Prints one JSON object per line. Usage: bench/run_cpu_bench.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench}
mkdir -p "$TMP"
"$BUILD/bin/memory_bandwidth" --mib 1024 --reps 9
for dt in f32 bf16; do
  f="$TMP/llama-110m-$dt.gguf"
  [ -f "$f" ] || "$BUILD/bin/make_random_llama" --out "$f" --dim 768 --layers 12 --heads 12 --kv-heads 12 \
      --hidden 2048 --vocab 32000 --dtype "$dt" --seed 1 --context 1024 >&2
done
if [ -f ../shared/models/stories260K/stories260K.gguf ]; then
  "$BUILD/bin/strata" bench -m ../shared/models/stories260K/stories260K.gguf --prompt-tokens 128 --gen-tokens 128 --json
fi
for dt in f32 bf16; do
  "$BUILD/bin/strata" bench -m "$TMP/llama-110m-$dt.gguf" --prompt-tokens 128 --gen-tokens 64 -r 5 --json
done
