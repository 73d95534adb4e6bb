#!/usr/bin/env bash
# Where the 4,096-token prefill's time goes (issue 3's prefill row): cuBLASLt's first 8
# heuristic candidates for each Llama-3-8B product at 4,096 tokens (graph-replayed us and
# TFLOP/s), then the in-pass GPU time per op of one eager 4,096-token prefill
# (STRATA_CUDA_PROFILE=1). Builds what it needs into build-gpu first.
# Usage (repo root, on the GPU machine): bash scripts/gpu/prefill_probe.sh
set -uo pipefail
cd "$(cd "$(dirname "$0")/../.." && pwd)"
source scripts/gpu/deps_env.sh
STRATA_GPU_TARGETS="strata strata-backend-cuda cuda_op_bench" OUT=/tmp/probe-logs bash scripts/gpu/run_gpu.sh build > /dev/null 2>&1
echo "=== cuBLASLt candidates at 4,096 tokens"
STRATA_OP_BENCH=gemm STRATA_OP_BENCH_TOKENS=4096 STRATA_OP_BENCH_GEMM_CANDIDATES=8 timeout 240 build-gpu/bin/cuda_op_bench 2>&1 | python3 -c '
import json, sys
for l in sys.stdin:
    if l.startswith("{\"op\""):
        r = json.loads(l)
        flops = r["TFLOPs"] * r["us"] / r["graph_us"] if r["graph_us"] > 0 else 0
        print("%-8s %5d %-16s graph_us %9.1f  TFLOP/s %6.1f" % (r["shape"], r["tokens"], r["path"], r["graph_us"], flops))
'
echo "=== one 4,096-token prefill, eager, GPU time per op"
STRATA_CUDA_PROFILE=1 timeout 120 build-gpu/bin/strata bench --synthetic llama3-8b --device cuda --prompt-tokens 4096 \
  --gen-tokens 2 --batch-tokens 4096 -r 1 --enforce-eager --json 2>&1 | grep -A30 "strata cuda op profile"
