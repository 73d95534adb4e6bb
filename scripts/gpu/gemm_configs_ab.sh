#!/usr/bin/env bash
# The CUDA backend's cuBLASLt configuration tables (backends/cuda/gemm_config_table.h) in
# the serving benchmark, Llama-3-8B shape, bf16: 128 concurrent sequences with the default
# (gemm_configs=builtin: this GPU's built-in table, builtin_gemm_configs.cpp) against
# gemm_configs=none (the heuristic's first choice), alternately on one machine, ROUNDS rounds
# (default 2). With TOKENS (e.g. 128 or 64,128) bench/cuda/gemm_search first searches those
# token counts and writes $OUT/gemm_configs.txt (GEMM_SEARCH_ARGS adds options, e.g.
# "--finalists 8 --sustained-ms 300"), and a third mode runs with that table.
# One line per run (scripts/gpu/env_ab.sh), the JSON in $OUT/gemm_configs_ab.jsonl.
# Usage (repo root, after run_gpu.sh built build-gpu): bash scripts/gpu/gemm_configs_ab.sh [ROUNDS] [TOKENS]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${BUILD:-build-gpu}"
OUT="${OUT:-$ROOT/gpu-logs}"
ROUNDS="${1:-2}"
TOKENS="${2:-}"
TABLE="$OUT/gemm_configs.txt"
if [ -n "$TOKENS" ]; then
  rm -f "$TABLE"
  timeout 400 "$BUILD/bin/gemm_search" --tokens "$TOKENS" ${GEMM_SEARCH_ARGS:-} --write "$TABLE" | tee "$OUT/gemm_search.jsonl" | \
    python3 -c 'import json,sys
for l in sys.stdin:
    r = json.loads(l)
    print("%-8s n=%-4d heuristic %.2f us (%.3f)  best %.2f us (%.3f)  %s" % (r["shape"], r["tokens"], r["heuristic_us"],
          r["heuristic_bw_fraction"], r["best_us"], r["best_bw_fraction"], r["top"][0]["config"]))'
fi
MODES=(builtin:STRATA_CUDA_GEMM_CONFIGS= none:STRATA_CUDA_GEMM_CONFIGS=none)
[ -n "$TOKENS" ] && MODES+=("search:STRATA_CUDA_GEMM_CONFIGS=$TABLE")
BUILD="$BUILD" OUT="$OUT" AB_LOG="$OUT/gemm_configs_ab.jsonl" bash scripts/gpu/env_ab.sh "$ROUNDS" "${MODES[@]}"
