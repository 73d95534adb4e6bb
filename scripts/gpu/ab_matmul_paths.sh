#!/usr/bin/env bash
# A/B of the CUDA matmul paths on the engine benchmarks of issue 3 (Llama-3-8B shape, bf16,
# C concurrent sequences, 128 in / 128 out): each of gemm_tune= and pdl= on and off,
# through STRATA_CUDA_GEMM_TUNE / STRATA_CUDA_PDL. One summary line per run.
# Usage: ab_matmul_paths.sh [BUILD] [C...]   (default: build-gpu 32 128)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${1:-build-gpu}"; shift || true
LEVELS="${*:-32 128}"
S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
for c in $LEVELS; do
  for tune in on off; do
    for pdl in on off; do
      STRATA_CUDA_GEMM_TUNE=$tune STRATA_CUDA_PDL=$pdl timeout 120 $S --num-requests $c --prompt-len-min 128 \
        --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 |
        python3 -c "
import json, sys
d = json.loads(sys.stdin.read())
print('c=$c gemm_tune=$tune pdl=$pdl: %.0f tok/s, TPOT p50 %.2f ms, TTFT p50 %.0f ms, forward %.2f ms/step, host %.3f ms/step, %d steps' % (
  d['output_tokens_per_s'], d['tpot_ms']['p50'], d['ttft_ms']['p50'], d['forward_ms_per_step'], d['host_ms_per_step'], d['steps']))"
    done
  done
done
