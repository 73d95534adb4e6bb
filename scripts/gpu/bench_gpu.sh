#!/usr/bin/env bash
# The GPU benchmarks alone (no tests): builds strata and the plugins on the GPU machine the
# way run_gpu.sh does, then runs the Llama-3-8B-shape figures of issue 3. For a short run
# when the tests have already passed on the same code. Logs go to $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-logs}"
mkdir -p "$OUT"
source scripts/gpu/deps_env.sh
BUILD=build-gpu
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$DEPS/usr" \
  -DSTRATA_BUILD_TESTS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_CUDA_ARCHITECTURES=90a-real >/dev/null || exit 1
cmake --build "$BUILD" -j16 --target strata strata-backend-cuda 2>&1 | grep -E "error|FAILED" | head -20
S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
timeout 120 $S --prompt-tokens 128 --gen-tokens 128 -r 3 | tee "$OUT/bench_8b_decode.json"
timeout 100 $S --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3 | tee "$OUT/bench_8b_prefill.json"
for c in 32 128; do
  timeout 100 $S --num-requests $c --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 \
    --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 | tee "$OUT/bench_8b_serving_$c.json"
done
