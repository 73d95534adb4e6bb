#!/usr/bin/env bash
# The larger-model check of issue 32: a Llama-3-8B-shape f16 GGUF (random weights, 16.06 GB)
# run by strata's CPU backend and by llama.cpp alternately (bench/cpu_vs_llamacpp.sh does the
# rounds, the bandwidth measurement and the table), on a machine whose 24 GiB of memory hold
# one copy of the weights and little else: strata copies the weights out of the file into its
# own memory (releasing the file's pages as it goes), llama.cpp maps the file.
#
# Usage: bench/cpu_vs_llamacpp_8b.sh [BUILD_DIR] [ROUNDS]
#   env: MODELS_8B (folder for the file, default /work/models-8b: not /tmp, not the repo),
#        P (prompt tokens, default 128), N (decoded tokens, default 64), THREADS (2),
#        REPS (timed repetitions per engine and round, default 1: each costs a prefill and
#        N decodes, ~1 min at this size; one untimed warm-up run comes on top for strata).
# The file is made on first use with make_random_llama (streamed: one tensor in memory at a
# time). Before it starts, the script checks that the machine has the memory for one engine
# and stops otherwise, rather than pushing other users' memory out.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
DIR=${MODELS_8B:-/work/models-8b}
MODEL="$DIR/llama3-8b-shape-f16.gguf"
export P=${P:-128} N=${N:-64} THREADS=${THREADS:-2} REPS=${REPS:-1}
mkdir -p "$DIR"
if [ ! -f "$MODEL" ]; then
  avail_kb=$(df -Pk "$DIR" | awk 'NR==2 {print $4}')
  (( avail_kb > 17 * 1024 * 1024 )) || { echo "$DIR: need 17 GB free for the model, have $((avail_kb / 1024 / 1024)) GB" >&2; exit 1; }
  # Llama-3-8B: dim 4096, 32 layers, 32 heads / 8 KV heads, FFN 14336, vocab 128256.
  "$BUILD/bin/make_random_llama" --out "$MODEL.part" --dim 4096 --layers 32 --heads 32 --kv-heads 8 \
      --hidden 14336 --vocab 128256 --dtype f16 --seed 1 --context 2048 >&2
  mv "$MODEL.part" "$MODEL"
fi
weights_kb=$(( $(stat -c %s "$MODEL") / 1024 ))
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
# One engine at a time holds the weights (strata: anonymous memory; llama.cpp: the mapped
# file); 1.5 GB more for the KV cache, activations and runtime.
need_kb=$(( weights_kb + 1536 * 1024 ))
if (( avail_kb < need_kb )); then
  echo "MemAvailable $((avail_kb / 1024)) MiB < $((need_kb / 1024)) MiB needed for one engine on $MODEL" >&2
  exit 1
fi
echo "model $MODEL ($((weights_kb / 1024)) MiB), MemAvailable $((avail_kb / 1024)) MiB, P=$P N=$N THREADS=$THREADS REPS=$REPS ROUNDS=$ROUNDS" >&2
STRATA_BENCH_TMP=${STRATA_BENCH_TMP:-/tmp/strata-bench-8b} exec bash bench/cpu_vs_llamacpp.sh "$BUILD" "$ROUNDS" "$MODEL"
