#!/usr/bin/env bash
# The serving benchmark (Llama-3-8B shape, bf16, 128 in / 128 out) under several sets of
# environment variables, alternately on one machine (machines differ by ~3%), ROUNDS rounds.
# Each MODE is NAME or NAME:ITEM,ITEM,...: VAR=VALUE sets a variable for that mode's runs (an
# empty VALUE unsets it), --flag adds a flag to its `strata bench` command. CASES (default "serving_128") picks among serving_128, serving_32 and
# decode_1 (batch-1 decode, 3 repetitions). One line per run (scripts/gpu/summarize_async.py),
# the JSON in $OUT/env_ab.jsonl (AB_LOG names another file).
# Usage (repo root, after run_gpu.sh built build-gpu):
#   bash scripts/gpu/env_ab.sh ROUNDS MODE...
#   e.g. bash scripts/gpu/env_ab.sh 2 builtin none:STRATA_CUDA_GEMM_CONFIGS=none
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${BUILD:-build-gpu}"
OUT="${OUT:-$ROOT/gpu-logs}"
ROUNDS="${1:-2}"
shift
LOG_FILE="${AB_LOG:-$OUT/env_ab.jsonl}"
S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
SERVE="--prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-batched-tokens 8192"
declare -A ARGS=(
  [serving_128]="--num-requests 128 --max-num-seqs 128 $SERVE"
  [serving_32]="--num-requests 32 --max-num-seqs 32 $SERVE"
  [decode_1]="--prompt-tokens 128 --gen-tokens 128 -r 3"
)
for r in $(seq 1 "$ROUNDS"); do
  for c in ${CASES:-serving_128}; do
    for spec in "$@"; do
      name="${spec%%:*}"
      envs=()
      flags=()
      if [ "$spec" != "$name" ]; then
        IFS=',' read -ra items <<< "${spec#*:}"
        for p in "${items[@]}"; do
          if [ "${p#--}" != "$p" ]; then flags+=("$p")
          elif [ -z "${p#*=}" ]; then envs+=(-u "${p%%=*}")
          else envs+=("$p"); fi
        done
      fi
      res=$(env "${envs[@]}" timeout 150 $S ${ARGS[$c]} "${flags[@]}" 2>/dev/null | tail -1)
      [ -n "$res" ] || res=null
      line="{\"case\":\"$c\",\"mode\":\"$name\",\"round\":$r,\"result\":$res}"
      echo "$line" >> "$LOG_FILE"
      python3 scripts/gpu/summarize_async.py --line "$line"
    done
  done
done
python3 scripts/gpu/summarize_async.py "$LOG_FILE"
