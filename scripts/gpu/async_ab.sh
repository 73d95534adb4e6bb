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
CASES="serving_128 decode_1 serving_32" BUILD="$BUILD" OUT="$OUT" AB_LOG="$OUT/async_ab.jsonl" \
  bash scripts/gpu/env_ab.sh "$ROUNDS" async sync:--no-async-scheduling
