#!/usr/bin/env bash
# Head_dim 64 (Llama-3.2-1B shape): the wgmma prefill attention kernel against FA2, first the
# op bench's head_dim-64 prefill cases, then the llama3-1b 4,096-token prefill, alternately
# (ROUNDS rounds, default 2). What WgmmaPrefillPreferred's head_dim-64 rule rests on.
# Usage (repo root, on the GPU machine, after run_gpu.sh build with strata, the plugin and
# cuda_op_bench): bash scripts/gpu/prefill_hd64.sh [ROUNDS]
set -uo pipefail
cd "$(cd "$(dirname "$0")/../.." && pwd)"
source scripts/gpu/deps_env.sh
B="${BUILD:-build-gpu}/bin"
for k in wgmma fa2; do
  STRATA_CUDA_PREFILL_ATTENTION=$k STRATA_OP_BENCH=attention \
    STRATA_OP_BENCH_ATTENTION_CASES=1x4096x4096x64,1x4096x512x64,8x1024x1024x64,64x128x128x64 \
    timeout 100 "$B/cuda_op_bench" 2>&1 | grep -E '"op":"attention"' | sed "s/^/$k /"
done
for r in $(seq 1 "${1:-2}"); do
  for k in wgmma fa2; do
    echo -n "$k llama3-1b 4096-token prefill, tok/s: "
    STRATA_CUDA_PREFILL_ATTENTION=$k timeout 100 "$B/strata" bench --synthetic llama3-1b --device cuda --json \
      --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3 |
      python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["prefill_tokens_per_s"])'
  done
done
