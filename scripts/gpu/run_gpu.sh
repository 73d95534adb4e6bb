#!/usr/bin/env bash
# One reproducible GPU run: unpack the build dependencies carried in .gpu/ (made by
# scripts/gpu/prepare.sh on the build machine), configure and build everything, run all
# tests (CPU and CUDA), the end-to-end model checks on the CUDA backend, and a benchmark.
# Logs go to $OUT (the device tool's output folder) or ./gpu-logs.
# Usage (repo root, on the GPU machine): bash scripts/gpu/run_gpu.sh
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-logs}"
mkdir -p "$OUT"
LOG="$OUT/run_gpu.log"
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
nproc; cmake --version | head -1; nvcc --version | tail -1

stamp "unpack dependencies"
source scripts/gpu/deps_env.sh
if [ -f .gpu/tokenizers.tar.xz ] && [ ! -d .gpu/shared/tokenizers ]; then
  tar -C .gpu/shared -xJf .gpu/tokenizers.tar.xz
fi

stamp "configure"
BUILD=build-gpu
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$DEPS/usr" -DSTRATA_SHARED_DIR="$ROOT/.gpu/shared" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DCMAKE_CUDA_ARCHITECTURES="${STRATA_CUDA_ARCHS:-90a-real}" 2>&1 | tail -25
[ -f "$BUILD/build.ninja" ] || { stamp "configure failed"; exit 1; }

stamp "build"
cmake --build "$BUILD" -j16 -- -k 0 2>&1 | grep -E "error|Error|FAILED|warning: .*cuda|^\[[0-9]+/[0-9]+\] Linking" | tail -60
cmake --build "$BUILD" -j16 >/dev/null 2>&1  # status of the full build
BUILD_RC=$?
stamp "build rc=$BUILD_RC"
ldd "$BUILD/bin/libstrata-backend-cuda.so" | grep -v "linux-vdso" || true

stamp "CUDA backend tests"
timeout 200 "$BUILD/bin/cuda_backend_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_backend_test.log" | \
  grep -vE "^\[ RUN|^\[       OK" | tail -80

stamp "CUDA backend tests, repeated (ordering races show up intermittently)"
(cd "$BUILD" && timeout 120 ctest -R Cuda --repeat until-fail:2 -j1 2>&1 | tail -5)

stamp "synthetic Llama-3-8B shape, bf16: batch-1 decode (128 in / 128 out) and a 4096-token prefill"
timeout 150 "$BUILD/bin/strata" bench --synthetic llama3-8b --device cuda --prompt-tokens 128 --gen-tokens 128 -r 3 --json 2>&1 | tee "$OUT/bench_8b_decode.json" | tail -3
timeout 120 "$BUILD/bin/strata" bench --synthetic llama3-8b --device cuda --prompt-tokens 4096 --gen-tokens 2 \
  --batch-tokens 4096 -r 3 --json 2>&1 | tee "$OUT/bench_8b_prefill.json" | tail -3

stamp "synthetic Llama-3-8B shape, bf16: 32 and 128 concurrent sequences, 128 in / 128 out (engine, continuous batching)"
for c in 32 128; do
  timeout 150 "$BUILD/bin/strata" bench --synthetic llama3-8b --device cuda --num-requests $c \
    --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 \
    --max-num-seqs $c --max-batched-tokens 8192 --json 2>&1 | tee "$OUT/bench_8b_serving_$c.json" | tail -3
done

stamp "end-to-end model checks on CUDA"
timeout 120 python3 scripts/gpu/check_models.py "$BUILD/bin/strata" "$ROOT/.gpu/shared" 2>&1 | tee "$OUT/models.log"

stamp "CUDA op timings at Llama-3-8B shapes"
timeout 120 "$BUILD/bin/cuda_op_bench" 2>&1 | tee "$OUT/op_bench.log"

stamp "all tests (ctest)"
(cd "$BUILD" && OMP_NUM_THREADS=2 timeout 120 ctest -j8 --timeout 60 --output-on-failure 2>&1) > "$OUT/ctest.log"
grep -E "tests passed|tests failed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | tail -40

stamp "devices + bench"
"$BUILD/bin/strata" devices 2>&1 | tail -20
S=.gpu/shared/models/stories260K
for dev in cuda cpu; do
  timeout 30 "$BUILD/bin/strata" bench -m "$S/stories260K.bin" --tokenizer "$S/tok512.bin" --device $dev \
    --prompt-tokens 128 --gen-tokens 64 --json 2>&1 | tail -3
done
for m in .gpu/shared/models/hf-tiny/*; do
  timeout 30 "$BUILD/bin/strata" bench -m "$m" --device cuda --prompt-tokens 128 --gen-tokens 64 --json 2>&1 | tail -3
done
stamp "done"
