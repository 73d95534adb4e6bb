#!/usr/bin/env bash
# One reproducible GPU run: unpack the build dependencies carried in .gpu/ (made by
# scripts/gpu/prepare.sh on the build machine), configure and build everything, then the
# phases asked for, in the order given (default: tests models bench ops batching http;
# `build` alone builds and runs nothing):
#   tests      every CUDA test (op tests twice), then all ctest tests
#   models     end-to-end model checks on the CUDA backend against llama2.c / HF references
#              (scripts/gpu/check_models.py)
#   bench      Llama-3-8B-shape figures: batch-1 decode (graphs, eager, without PDL),
#              4096-token prefill, 32 and 128 concurrent sequences
#   ops        CUDA op timings at Llama-3-8B shapes (bench/cuda/cuda_op_bench)
#   batching   continuous vs static batching, shared-prefix TTFT (bench/gpu/serving.sh)
#   batching8b the same on the Llama-3-8B shape
#   http       `strata serve` under bench/openai_load vs the in-process engine
#   profile    GPU time per op and shape (STRATA_CUDA_PROFILE=1) at 128 and 32 sequences
#   logprobs   1, 32 and 128 sequences with and without --logprobs 5
#   clocks     SM clock, power draw and throttle reasons during a 128-sequence run
#   oclfinal   the OpenCL int8 kernels on NVIDIA's OpenCL, short (150 s): conformance, model checks,
#              the three W8A8 figures, all in ocl_final.txt
#   oclprof    the OpenCL W8A8 decode step (1 and 32 sequences, Llama-3-8B shape) on NVIDIA's OpenCL
#              with STRATA_OPENCL_PROFILE=1: device time per kernel and the gaps between kernels;
#              then fuse_quant=on (test, model checks, decode A/B) (about 120 s, ocl_prof.txt)
#   oclsweep   the OpenCL int8 kernels on NVIDIA's OpenCL: matmul conformance on opencl:0, then
#              Llama-3-8B-shape W8A8 decode / 32-sequence / prefill steps per kernel variant
#   ocl_nv     the OpenCL GPU kernels of helper ocl-nv (decode attention, few-token mma, dense GEMV,
#              fused quantization by default): conformance, model checks, profiled and A/B W8A8
#              steps, prefill (about 150 s, ocl-nv_ocl.txt)
#   opencl     the OpenCL backend through NVIDIA's OpenCL ICD: device report, backend test,
#              conformance suite, model checks, then Llama-3-8B-shape W8A8 figures beside CUDA
#   quant      the quantized matmul tests (cuda_quant_test, float64 reference; a failure stops
#              the run), the 8-bit KV cache tests (cuda_kv8_test, conformance Attention), then
#              Llama-3-8B step weight products per format beside BF16
#              (bench/cuda/quant_matmul_bench, quant_bench.jsonl)
#   quant8b    end-to-end quantized Llama-3-8B shapes (--synthetic-dtype, weights made by core/quant's
#              round-to-nearest), each beside bf16 in the same run: batch-1 decode 128/128 W4A16
#              (also with STRATA_CUDA_QGEMV=v1, the SIMT GEMV) and W8A16; 128 sequences 128/128
#              W8A8 and FP8; 4096-token prefill W8A8 (quant8b_*.json; under 8 minutes);
#              quant8b_quick: its W4A16 / W8A16 GEMV part (under 4 minutes)
#   qgemv_final  qgemv's 90-second form, one output file (cuda-gemv_final.txt)
#   gemv3      the streaming GEMV's model-vs-sweep gap and its fix (issue 28 items 1-2, about 2
#              minutes, $OUT/cuda-gemv_*): tests, one-token sweeps with zero points, W4A16 / W8A16
#              batch-1 decode, one eager W4A16 step's op profile
#   gemv3_final  the same, call 2: tests, W4A16 / W8A16 decode -r 3 with the streaming GEMV as the
#              default, one eager step's op profile, sweeps as the budget allows
#   cuda_gemv_sass  the W4A16 streaming GEMV's opt-in lean loop (STRATA_CUDA_QGEMV_LEAN=1; about
#              90 s, CUDA_GEMV_SASS_BUDGET, $OUT/cuda-gemv-sass_*.txt): Stream* tests with it
#              forced, the one-token W4A16 sweep (default vs lean), int4-g128 decode lean vs default
#   qgemv      the streaming W4A16 / W8A16 GEMV: its tests, the launch-configuration sweep
#              (bench/cuda/qgemv_sweep.cu), batch-1 decode bf16 / W4A16 / W8A16 (about 4
#              minutes); qgemv_ab: W4A16 / W8A16 decode with the previous GEMV and unfused
#              prologues (about 3 minutes)
#   w8a8       W8A8 / FP8 with the fused prologue quantization and the wgmma GEMM (issue 28 items
#              3, 5, 7; under 3 minutes): the 8-bit cuda_quant_test cases, the step's products as
#              the model issues them (quant_matmul_bench --ops layer) at 128 and 4096 tokens beside
#              bf16, 128 sequences 128/128 W8A8 and FP8, 4096-token prefill W8A8 (w8a8_*)
#   w8a8_ab    GPU time per op of one eager step (w8a8_profile.txt), then the same products and
#              runs with the previous path (quant_gemm=cublas, quant_fuse=off) and with the wgmma
#              GEMM at every size (quant_gemm=wgmma), for the A/B (under 5 minutes)
#   w8a8_ncu   Nsight Compute sections of the s8 wgmma GEMM at 128 tokens (w8a8_ncu.txt)
#   w8a8_prefill the 4,096-token W8A8 prefill (helper cuda-prefill, under 120 s, $OUT/cuda-prefill_*.txt):
#              8-bit tests, prefill w8a8 (+ multicast) / fp8 / bf16, the W8A8 prefill op by op,
#              products per GEMM choice, 128 sequences W8A8
#   w8a8_final the w8a8 follow-up in one file (cuda-w8a8_final.txt, under 90 s): quantization and
#              8-bit product timed apart for each GEMM choice at 128 and 4096 tokens, ncu pass
#   kv8        the 8-bit KV caches (issue 28 item 6): cuda_kv8_test (every attention kernel path
#              with FP8 / I8 caches vs float64, engine greedy agreement) and the conformance
#              Attention cases on cuda, then decode TPOT p50 of
#              32 sequences at 4,096-token contexts with BF16, FP8 and I8 caches (Llama-3-8B
#              shape, bf16 weights; kv8_tpot.jsonl; the decode step alone, op by op, in
#              kv8_step.jsonl, the attention kernels alone in kv8_attention_bench.jsonl), then stories260K perplexity with
#              --kv-dtype f32/fp8/int8 on CUDA and CPU (kv8_ppl.jsonl; needs
#              .gpu/shared/text/tinystories_sample.txt)
#   kv8_splitk the split-K tensor-core decode attention (issue 28 item 6; about 300 s,
#              KV8_SPLITK_BUDGET, files $OUT/cuda-attn2_*.txt): decode tests (a summary line
#              first), attention kernels alone per form at 32 x 4,096 and 1 x 256, the KV read
#              ceiling per row size, steady TPOT p50 32 x 4,096 BF16 vs FP8 KV, batch-1 decode
#              128/128 per decode kernel
#   attn3      the FP8 decode attention's forms (helper cuda-attn3, issue 28 item 6; about 100 s,
#              ATTN3_BUDGET; everything in $OUT/attn3.txt): the tensor-core kernel alone at
#              32 x 4,096 per form (STRATA_CUDA_DECODE_MMA_KV8=direct|lean|lite, ATTN3_FORMS;
#              `default` is lean + lite since call 2), the FP8 decode tests with each of the three
#              fastest forms forced, in parallel (ATTN3_TEST_FORM="f1 f2" overrides the pick),
#              steady TPOT p50 32 x 4,096 BF16 vs FP8 KV (default form and the fastest whose tests passed)
#   attn3_final attn3's winner (lean + lite) as the FP8 default, verified (about 60 s, ATTN3_BUDGET;
#              $OUT/attn3_final.txt): the host choice rules, the FP8 decode tests on the default path
#              (three processes at once), steady TPOT p50 32 x 4,096 BF16 and FP8 KV
#   kv8quick   the follow-up of run 1 (about 3 minutes): 8-bit op tests, the GQA kernel's wide
#              8-bit form, the attention kernel and the decode step per form, FP8 perplexity
#              with F32 activations
#   quantppl   stories260K quantized (8 methods) with CUDA and CPU calibration: files compared,
#              perplexity on CUDA (bf16 and f32 activations) beside the CPU's (quantppl.jsonl)
#   cuda_quant the activation quantization kernel (issue 28; CUDA_QUANT_BUDGET s, default 200):
#              its 8-bit tests (~40 s), then 4,096-token prefill and 128 sequences, W8A8 and FP8,
#              under the default kernel, then (budget permitting: ~240 s) profiled products v2
#              vs v1, (~400 s) the e2e figures under STRATA_CUDA_QUANT_PROLOGUE=v1 (cuda-quant_*.txt)
#   cuda_quant_final  the same kernel's final check (CUDA_QUANT_FINAL_BUDGET s, default 95): tests,
#              products profiled per format default vs v1, W8A8 prefill (cuda-quant-final_*.txt)
#   gemm8      the 8-bit wgmma GEMM at 128-256 tokens (helper cuda-gemm8, GEMM8_BUDGET s, default
#              120, $OUT/cuda-gemm8.txt): configuration sweep, wide-tile tests, products per option;
#              gemm8_final (GEMM8_FINAL_BUDGET, default 100): the GEMM tests, 128 sequences W8A8
#              new / old default and FP8 new, products at 64 / 256 tokens per option
#   serve256   256 concurrent clients through `strata serve`, bf16 vs FP8 weights + FP8 KV
#   cuda_fp8acc  the FP8 wgmma GEMM's promoted accumulation (fp8_promote=on; helper cuda-fp8acc,
#              never run on a GPU yet; CUDA_FP8ACC_BUDGET s, default 60, $OUT/cuda-fp8acc.txt):
#              K = 14,336 precision test off / on / 256, fp8 products' cost per setting, existing FP8
#              tests with it on
#   cuda_pfa   the Hopper prefill attention's forms (helper cuda-pfa, issue 28; never run on a GPU yet;
#              CUDA_PFA_BUDGET s, default 120: tests + op bench + ~1 e2e run; 220 for every step;
#              targets strata strata-backend-cuda cuda_backend_test cuda_op_bench;
#              $OUT/cuda-pfa_{tests,ops,e2e}.txt): the CudaPrefillAttention tests (the forms test split
#              over processes by CUDA_PFA_TEST_FORMS, default "0,1,2 3,4 5 6"; CPU-backend reference),
#              the kernel alone per form (STRATA_CUDA_PREFILL_WGMMA_FORM; CUDA_PFA_FORMS, default
#              "0 1 5 6", "0 1 2 3 4 5 6 fa2" for the full attribution; 4,096-token prompt, 512 after
#              3,584, 8 x 1,024, 64 x 128, head_dim 128 and 64), then 4,096-token prefill W8A8 and BF16,
#              -r 3, with the fastest form at 4,096 tokens (or CUDA_PFA_NEW) and form 0
#   parallel   the NCCL communicator test at one rank, served text with --tensor-parallel-size 1
#              --pipeline-parallel-size 1 vs without, Llama-3-8B-shape decode / 32 sequences
# The kernel-variant experiments of earlier issues (GEMM paths, attention and prefill kernel
# A/Bs, Nsight Compute probes) were removed once decided; their results are in
# docs/benchmarks-log.md and the scripts in git history (before this file's tidy-up commit).
# Logs go to $OUT (the device tool's output folder) or ./gpu-logs.
# Usage (repo root, on the GPU machine): bash scripts/gpu/run_gpu.sh [PHASE...]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-logs}"
mkdir -p "$OUT"
LOG="$OUT/run_gpu.log"
exec > >(tee -a "$LOG") 2>&1
PHASES="${*:-tests models bench ops batching http}"
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
# A bare `wait` also waits for the process substitution of the `exec > >(tee ...)` above (bash 5.1+),
# which never ends: it hung two device calls (600 s, 2 x 130 s). Wait on the background jobs only.
wait_children() { local p; for p in $(jobs -p); do wait "$p"; done; }
# budget_step PHASE NAME LIMIT MIN CMD...: within a phase that has set $F (its results file),
# $t_start and $budget, runs CMD under `timeout LIMIT` (cut to what is left) with its output
# appended to $F under a header, or says it is skipped when fewer than MIN s are left.
budget_step() {
  local phase=$1 name=$2 limit=$3 min=$4 left rc
  shift 4
  left=$(( budget - (SECONDS - t_start) ))
  if (( left < min )); then echo "=== skipped $name: ${left}s of the phase's ${budget}s left" | tee -a "$F"; return 1; fi
  (( limit > left )) && limit=$left
  stamp "$phase $name (limit ${limit}s)"
  echo "=== $name (limit ${limit}s): $*" >> "$F"
  timeout "$limit" "$@" >> "$F" 2>&1
  rc=$?
  echo "=== $name rc=$rc at $(( SECONDS - t_start ))s" >> "$F"
  return $rc
}

stamp "machine (phases: $PHASES)"
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
  -DCMAKE_CUDA_ARCHITECTURES="${STRATA_CUDA_ARCHS:-90a-real}" 2>&1 | tail -5
[ -f "$BUILD/build.ninja" ] || { stamp "configure failed"; exit 1; }

# STRATA_GPU_TARGETS limits the build (e.g. a short run that needs only the CLI, the plugin
# and the CUDA tests); the default builds everything.
TARGETS=()
[ -n "${STRATA_GPU_TARGETS:-}" ] && TARGETS=(--target ${STRATA_GPU_TARGETS})
stamp "build ${STRATA_GPU_TARGETS:-all}"
cmake --build "$BUILD" -j16 "${TARGETS[@]}" -- -k 0 2>&1 | grep -E "error|Error|FAILED|warning: .*cuda" | tail -60
cmake --build "$BUILD" -j16 "${TARGETS[@]}" >/dev/null 2>&1  # status of the build
BUILD_RC=$?
stamp "build rc=$BUILD_RC"

phase_tests() {
  stamp "CUDA backend op tests"
  timeout 300 "$BUILD/bin/cuda_backend_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_backend_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -60
  stamp "CUDA decode-graph tests"
  timeout 200 "$BUILD/bin/cuda_graph_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_graph_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -30
  if [ -z "${STRATA_GPU_TARGETS:-}" ]; then
    stamp "CUDA op tests, repeated (ordering races show up intermittently)"
    (cd "$BUILD" && timeout 200 ctest -R "CudaOps" --repeat until-fail:2 -j1 2>&1 | tail -4)
    stamp "all tests (ctest)"
    (cd "$BUILD" && OMP_NUM_THREADS=2 timeout 200 ctest -j8 --timeout 90 --output-on-failure 2>&1) > "$OUT/ctest.log"
    grep -E "tests passed|tests failed|Failed|\*\*\*|Not Run|Timeout" "$OUT/ctest.log" | tail -40
  fi
}

phase_models() {
  stamp "end-to-end model checks on CUDA (decode graphs on, and --enforce-eager)"
  timeout 200 python3 scripts/gpu/check_models.py "$BUILD/bin/strata" "$ROOT/.gpu/shared" 2>&1 | tee "$OUT/models.log" | tail -40
}

phase_bench() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  stamp "Llama-3-8B shape, bf16: batch-1 decode 128 in / 128 out (decode graphs)"
  timeout 150 $S --prompt-tokens 128 --gen-tokens 128 -r 3 | tee "$OUT/bench_8b_decode.json"
  stamp "4096-token prefill"
  timeout 120 $S --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3 | tee "$OUT/bench_8b_prefill.json"
  stamp "32 and 128 concurrent sequences, 128 in / 128 out (engine, continuous batching)"
  for c in 32 128; do
    timeout 150 $S --num-requests $c --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 \
      --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 | tee "$OUT/bench_8b_serving_$c.json"
  done
  stamp "batch-1 decode with --enforce-eager (no decode graphs)"
  timeout 150 $S --prompt-tokens 128 --gen-tokens 128 -r 3 --enforce-eager | tee "$OUT/bench_8b_decode_eager.json"
  stamp "batch-1 decode without programmatic dependent launch (STRATA_CUDA_PDL=off)"
  STRATA_CUDA_PDL=off timeout 150 $S --prompt-tokens 128 --gen-tokens 128 -r 3 | tee "$OUT/bench_8b_decode_nopdl.json"
}

opencl_icd_setup() {
  # NVIDIA's OpenCL appears only through the machine's own ICD loader (the CUDA toolkit's
  # libOpenCL.so.1), not through the Debian ocl-icd that deps_env.sh puts first on the library
  # path: with the latter only PoCL showed (runs of 2026-12-02), with the former both did
  # (15:00 UTC). The machine presets OCL_ICD_FILENAMES=libpocl.so.2:libnvidia-opencl.so.1;
  # name NVIDIA's ICD by its path (PoCL still comes from /etc/OpenCL/vendors).
  export OCL_ICD_FILENAMES=/usr/local/nvidia/lib64/libnvidia-opencl.so.1
  [ -f /usr/local/cuda/targets/x86_64-linux/lib/libOpenCL.so.1 ] && \
    export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH"
  stamp "OpenCL platforms through the system ICD loader"
  python3 scripts/gpu/ocl_probe.py 2>&1 | head -5
}

# The short form for a run with little device time: the ICD probe, then only when NVIDIA's
# OpenCL device appears, the model checks and the issue's W8A8 figures on it.
phase_oclquick() {
  opencl_icd_setup
  "$BUILD/bin/strata" devices > "$OUT/ocl_devices.txt" 2>&1
  if ! sed -n '/^  opencl/,/^refused/p' "$OUT/ocl_devices.txt" | grep -q NVIDIA; then
    stamp "no NVIDIA OpenCL device: skipping the OpenCL GPU figures"
    sed -n '/^  opencl/,/^refused/p' "$OUT/ocl_devices.txt"
    return
  fi
  export XDG_CACHE_HOME="$OUT/xdg-cache"
  stamp "model checks on opencl:0 (NVIDIA)"
  STRATA_REQUIRE_BACKENDS=opencl timeout 120 "$BUILD/bin/model_reference_opencl_test" --gtest_color=no 2>&1 \
    | tee "$OUT/opencl_models.log" | grep -E "FAILED|PASSED|Failure" | tail -10
  stamp "Llama-3-8B shape W8A8 on opencl:0: decode 1 and 32 sequences, 4096-token prefill"
  local B="$BUILD/bin/decode_step_bench --shape llama3-8b --plugin $BUILD/bin/libstrata-backend-opencl.so --format w8a8"
  for run in "--mode decode --batch 1 --context 128 --reps 10" "--mode decode --batch 32 --context 128 --reps 5" \
             "--mode prefill --batch 4096 --reps 2"; do
    timeout 60 $B $run | tee -a "$OUT/opencl_figures.jsonl"
  done
}

# The GPU-shaped int8 kernels of the OpenCL backend (issue 29 follow-up) through NVIDIA's
# OpenCL: the matmul conformance cases on opencl:0 (the dp4a / mma.sync paths, which PoCL in
# CI cannot run; STRATA_OPENCL_VERBOSE=1 prints the integer path the probes chose), then
# Llama-3-8B-shape W8A8 steps per kernel variant (device options, backend_table.cpp):
# batch-1 decode over GEMV shapes and without dp4a, 32 sequences over the GEMV / GEMM
# crossover, 4096-token prefill with and without the tensor-core GEMM (ocl_sweep.jsonl).
phase_oclsweep() {
  opencl_icd_setup
  export XDG_CACHE_HOME="$OUT/xdg-cache"
  stamp "OpenCL matmul and attention conformance on opencl:0 (NVIDIA)"
  STRATA_OPENCL_VERBOSE=1 STRATA_REQUIRE_BACKENDS=opencl timeout 120 "$BUILD/bin/backend_conformance_test" \
    --gtest_color=no --gtest_filter='*Matmul*/opencl:*Int8Test*/opencl:*Attention*/opencl' 2>&1 | tee "$OUT/ocl_sweep_conformance.log" | \
    grep -E "strata opencl|FAILED|PASSED|Failure" | head -30
  local B="$BUILD/bin/decode_step_bench --shape llama3-8b --plugin $BUILD/bin/libstrata-backend-opencl.so --format w8a8"
  stamp "batch-1 decode per GEMV variant"
  for o in "" "gemv_rows=8" "gemv_wg=256" "int_dot=plain"; do
    STRATA_OPENCL_VERBOSE=1 timeout 40 $B --options "$o" --mode decode --batch 1 --context 128 --reps 10 \
      2>&1 | tee -a "$OUT/ocl_sweep.jsonl"
  done
  stamp "32 sequences: GEMV rows per group for 16-32 tokens, GEMV / GEMM crossover"
  for o in "" "gemv_rows_wide=1" "gemv_max_tokens=16" "gemv_max_tokens=8"; do
    STRATA_OPENCL_VERBOSE=1 timeout 40 $B --options "$o" --mode decode --batch 32 --context 128 --reps 5 \
      2>&1 | tee -a "$OUT/ocl_sweep.jsonl"
  done
  stamp "4096-token prefill: int8 mma.sync GEMM, dp4a GEMM"
  for o in "" "int_mma=off"; do
    STRATA_OPENCL_VERBOSE=1 timeout 60 $B --options "$o" --mode prefill --batch 4096 --reps 2 \
      2>&1 | tee -a "$OUT/ocl_sweep.jsonl"
  done
}

# The OpenCL int8 kernels on NVIDIA's OpenCL in one short call (timeouts sum to 150 s), all
# output in ONE file, $OUT/ocl_final.txt: the integer path the probes chose (dp4a / mma.sync
# through inline PTX, else plain int32), the matmul and attention conformance on opencl:0,
# the model checks, then the Llama-3-8B-shape W8A8 figures (batch-1 decode, 32 sequences,
# 4096-token prefill) and 32 sequences through the GEMM (gemv_max_tokens=16, a host-side
# option: same program). The kernel cache goes to /tmp, not $OUT.
phase_oclfinal() {
  local F="$OUT/ocl_final.txt"
  {
    opencl_icd_setup
    export XDG_CACHE_HOME="/tmp/strata-ocl-cache"
    stamp "matmul / attention conformance on opencl:0"
    STRATA_OPENCL_VERBOSE=1 STRATA_REQUIRE_BACKENDS=opencl timeout 30 "$BUILD/bin/backend_conformance_test" \
      --gtest_color=no --gtest_filter='*Matmul*/opencl:*Int8Test*/opencl:*Attention*/opencl' 2>&1 | \
      grep -E "strata opencl|FAILED|PASSED|Failure|Which is|evaluates|exceeds|token|element|dim " | head -40
    echo "conformance rc=${PIPESTATUS[0]} (124: timed out)"
    stamp "model checks on opencl:0"
    STRATA_REQUIRE_BACKENDS=opencl timeout 30 "$BUILD/bin/model_reference_opencl_test" --gtest_color=no 2>&1 | \
      grep -E "FAILED|PASSED|Failure" | head -12
    echo "model checks rc=${PIPESTATUS[0]} (124: timed out)"
    stamp "Llama-3-8B shape W8A8 on opencl:0"
    local B="$BUILD/bin/decode_step_bench --shape llama3-8b --plugin $BUILD/bin/libstrata-backend-opencl.so --format w8a8"
    STRATA_OPENCL_VERBOSE=1 timeout 20 $B --mode decode --batch 1 --context 128 --reps 10 || echo "rc=$? (124: timed out)"
    timeout 20 $B --mode decode --batch 32 --context 128 --reps 5 || echo "rc=$? (124: timed out)"
    timeout 30 $B --mode prefill --batch 4096 --reps 2 || echo "rc=$? (124: timed out)"
    timeout 20 $B --options "gemv_max_tokens=16" --mode decode --batch 32 --context 128 --reps 5 || echo "rc=$? (124: timed out)"
    stamp "oclfinal done"
  } > "$F" 2>&1
  tail -30 "$F"
}

# Where the OpenCL step's time goes on NVIDIA's OpenCL (issue 29 follow-up, about 120 s, one
# file $OUT/ocl_prof.txt): the Llama-3-8B-shape W8A8 decode step at 1 and 32 sequences with
# STRATA_OPENCL_PROFILE=1 (backends/opencl/profile.h): per kernel the launches and device time,
# and the time the device sat between kernels, per step (the median window) and in total.
# Then the fused activation quantization on the GPU (device option fuse_quant=on, off by
# default there: rms_norm / silu_mul write the int8 rows the next W8A8 GEMV reads, 3 launches
# fewer per layer): its test and the model checks on opencl:0 with it, and the batch-1 /
# 32-sequence steps without and with it, alternating.
phase_oclprof() {
  local F="$OUT/ocl_prof.txt"
  {
    opencl_icd_setup
    export XDG_CACHE_HOME="/tmp/strata-ocl-cache"
    local B="$BUILD/bin/decode_step_bench --shape llama3-8b --plugin $BUILD/bin/libstrata-backend-opencl.so --format w8a8"
    stamp "profiled W8A8 decode step, 1 sequence"
    STRATA_OPENCL_VERBOSE=1 STRATA_OPENCL_PROFILE=1 timeout 30 $B --mode decode --batch 1 --context 128 --reps 10 \
      || echo "rc=$? (124: timed out)"
    stamp "profiled W8A8 decode step, 32 sequences"
    STRATA_OPENCL_PROFILE=1 timeout 30 $B --mode decode --batch 32 --context 128 --reps 5 || echo "rc=$? (124: timed out)"
    stamp "fuse_quant=on: its test and the model checks on opencl:0"
    STRATA_REQUIRE_BACKENDS=opencl timeout 60 "$BUILD/bin/opencl_backend_test" --gtest_color=no \
      --gtest_filter='*Fused*' 2>&1 | grep -E "FAILED|PASSED|OK \]|Failure|Which is" | head -12
    STRATA_TEST_DEVICE_OPTIONS="fuse_quant=on" STRATA_REQUIRE_BACKENDS=opencl timeout 30 \
      "$BUILD/bin/model_reference_opencl_test" --gtest_color=no 2>&1 | grep -E "FAILED|PASSED|Failure" | head -12
    stamp "W8A8 decode steps without / with fuse_quant=on, alternating"
    for r in 1 2; do
      for o in "" "fuse_quant=on"; do
        timeout 20 $B --options "$o" --mode decode --batch 1 --context 128 --reps 10 || echo "rc=$? (124: timed out)"
      done
    done
    STRATA_OPENCL_PROFILE=1 timeout 30 $B --options "fuse_quant=on" --mode decode --batch 1 --context 128 --reps 10 \
      || echo "rc=$? (124: timed out)"
    stamp "oclprof done"
  } > "$F" 2>&1
  tail -60 "$F"
}

# The OpenCL GPU kernels of helper ocl-nv (issue 29: decode attention over many work-groups,
# the few-token int8 mma.sync product, the dense GEMV for the LM head up to 32 tokens, fused
# activation quantization on by default) on NVIDIA's OpenCL, one file $OUT/ocl-nv_ocl.txt,
# timeouts capped, the A/B medians skipped once OCL_NV_BUDGET seconds (default 150) are spent: the
# conformance Matmul / Int8 / Attention cases and the fused-quantization test on opencl:0, the
# model checks, the profiled W8A8 steps at 1 and 32 sequences, then unprofiled medians with
# each new path turned off in turn (host-side options: same program), a 4,096-token prefill.
phase_ocl_nv() {
  local F="$OUT/ocl-nv_ocl.txt" t0
  t0=$(date +%s)
  {
    opencl_icd_setup
    export XDG_CACHE_HOME="/tmp/strata-ocl-cache"
    stamp "conformance Matmul / Int8 / Attention on opencl:0"
    STRATA_OPENCL_VERBOSE=1 STRATA_REQUIRE_BACKENDS=opencl timeout 40 "$BUILD/bin/backend_conformance_test" \
      --gtest_color=no --gtest_filter='*Matmul*/opencl:*Int8Test*/opencl:*Attention*/opencl' 2>&1 | \
      grep -E "strata opencl|FAILED|PASSED|Failure|Which is|evaluates|exceeds|token|element|dim |seq " | head -40
    echo "conformance rc=${PIPESTATUS[0]} (124: timed out)"
    STRATA_REQUIRE_BACKENDS=opencl timeout 15 "$BUILD/bin/opencl_backend_test" --gtest_color=no \
      --gtest_filter='*Fused*' 2>&1 | grep -E "FAILED|PASSED|OK \]|Failure|Which is" | head -8
    stamp "model checks on opencl:0"
    STRATA_REQUIRE_BACKENDS=opencl timeout 30 "$BUILD/bin/model_reference_opencl_test" --gtest_color=no 2>&1 | \
      grep -E "FAILED|PASSED|Failure|Which is" | head -12
    echo "model checks rc=${PIPESTATUS[0]} (124: timed out)"
    local B="$BUILD/bin/decode_step_bench --shape llama3-8b --plugin $BUILD/bin/libstrata-backend-opencl.so --format w8a8"
    stamp "profiled W8A8 decode step, 1 sequence"
    STRATA_OPENCL_VERBOSE=1 STRATA_OPENCL_PROFILE=1 timeout 20 $B --mode decode --batch 1 --context 128 --reps 10 \
      || echo "rc=$? (124: timed out)"
    stamp "profiled W8A8 decode step, 32 sequences"
    STRATA_OPENCL_PROFILE=1 timeout 20 $B --mode decode --batch 32 --context 128 --reps 5 || echo "rc=$? (124: timed out)"
    stamp "medians: batch 1 (default, old attention kernel, unfused quantization, rope + kv_write apart, GEMV of 64 work-items)"
    for o in "" "att_decode=off" "fuse_quant=off" "rope_fused=off" "gemv_wg=64"; do
      [ -z "$o" ] || [ $(( $(date +%s) - t0 )) -lt $(( ${OCL_NV_BUDGET:-150} - 40 )) ] || { echo "budget spent: skipping '$o'"; continue; }
      timeout 12 $B --options "$o" --mode decode --batch 1 --context 128 --reps 10 || echo "rc=$? (124: timed out)"
    done
    stamp "medians: 32 sequences (default, 128x128 mma GEMM, LM head as dense GEMV 8 / 16 per launch, as the tiled GEMM, W8A8 GEMV at 32)"
    for o in "" "mma_small=off" "bf16_mma=off" "bf16_mma=off;dense_gemv_chunk=16" "bf16_mma=off;dense_gemv_max_tokens=8" "gemv_max_tokens=32"; do
      [ -z "$o" ] || [ $(( $(date +%s) - t0 )) -lt $(( ${OCL_NV_BUDGET:-150} - 30 )) ] || { echo "budget spent: skipping '$o'"; continue; }
      timeout 12 $B --options "$o" --mode decode --batch 32 --context 128 --reps 5 || echo "rc=$? (124: timed out)"
    done
    stamp "batch-1 decode at 4096 keys of context: split-K attention, and without it"
    for o in "" "att_split=off"; do
      [ -z "$o" ] || [ $(( $(date +%s) - t0 )) -lt $(( ${OCL_NV_BUDGET:-150} - 25 )) ] || { echo "budget spent: skipping '$o'"; continue; }
      timeout 12 $B --options "$o" --mode decode --batch 1 --context 4096 --reps 5 || echo "rc=$? (124: timed out)"
    done
    stamp "4096-token prefill"
    timeout 25 $B --mode prefill --batch 4096 --reps 2 || echo "rc=$? (124: timed out)"
    stamp "ocl_nv done"
  } > "$F" 2>&1
  tail -40 "$F"
}

phase_opencl() {
  opencl_icd_setup
  stamp "OpenCL devices (OCL_ICD_FILENAMES=$OCL_ICD_FILENAMES): GPUs first, so opencl:0 is the H200"
  "$BUILD/bin/strata" devices 2>&1 | tee "$OUT/opencl_devices.log"
  stamp "OpenCL backend test, conformance (opencl, opencl_gpu_kernels) and model checks"
  # A cache folder of this run's own: the first device_open builds the kernels from source.
  export XDG_CACHE_HOME="$OUT/xdg-cache"
  STRATA_REQUIRE_BACKENDS=opencl timeout 300 "$BUILD/bin/opencl_backend_test" --gtest_color=no 2>&1 | tail -4
  STRATA_REQUIRE_BACKENDS=opencl timeout 500 "$BUILD/bin/backend_conformance_test" --gtest_color=no \
    --gtest_filter='*/opencl:*/opencl_gpu_kernels:*/cuda' 2>&1 | tee "$OUT/opencl_conformance.log" | grep -E "FAILED|PASSED|Failure" | head -40
  STRATA_REQUIRE_BACKENDS=opencl timeout 500 "$BUILD/bin/model_reference_opencl_test" --gtest_color=no 2>&1 \
    | tee "$OUT/opencl_models.log" | grep -E "FAILED|PASSED|OK \]" | tail -30
  stamp "Llama-3-8B shape, op-level step: OpenCL W8A8 and f32/bf16, CUDA bf16 weights with f32 activations"
  local B="$BUILD/bin/decode_step_bench --shape llama3-8b"
  local OCL="--plugin $BUILD/bin/libstrata-backend-opencl.so" CU="--plugin $BUILD/bin/libstrata-backend-cuda.so --options activations=f32"
  for run in "--mode decode --batch 1 --context 128 --reps 10" "--mode decode --batch 32 --context 128 --reps 5" \
             "--mode prefill --batch 4096 --reps 3"; do
    timeout 300 $B $OCL --format w8a8 $run | tee -a "$OUT/opencl_figures.jsonl"
    timeout 300 $B $OCL --format bf16 $run | tee -a "$OUT/opencl_figures.jsonl"
    timeout 300 $B $CU --format bf16 $run | tee -a "$OUT/opencl_figures.jsonl"
  done
  stamp "CUDA engine figures for the same shapes (bf16, strata bench)"
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  timeout 150 $S --prompt-tokens 128 --gen-tokens 128 -r 3 | tee "$OUT/opencl_beside_cuda_decode.json"
  timeout 120 $S --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3 | tee "$OUT/opencl_beside_cuda_prefill.json"
  timeout 150 $S --num-requests 32 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 \
    --output-len-max 128 --max-num-seqs 32 --max-batched-tokens 8192 | tee "$OUT/opencl_beside_cuda_serving_32.json"
  stamp "OpenCL engine run (bf16 weights, f32 activations): strata bench --device opencl:0, batch-1 decode"
  timeout 200 "$BUILD/bin/strata" bench --synthetic llama3-8b --device opencl:0 --json --prompt-tokens 128 \
    --gen-tokens 64 -r 2 | tee "$OUT/opencl_engine_decode.json"
}

phase_clocks() {
  stamp "SM clock, power and throttle reasons every 50 ms during 128 concurrent sequences"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 50 > "$OUT/clocks.csv" &
  local smi=$!
  sleep 1
  timeout 150 "$BUILD/bin/strata" bench --synthetic llama3-8b --device cuda --json --num-requests 128 \
    --max-num-seqs 128 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 \
    --max-batched-tokens 8192 > "$OUT/clocks_serving_128.json"
  sleep 1
  kill "$smi"
  # Samples under load (> 150 W), and how many had the software power cap (bit 0x4) active.
  python3 -c 'import sys
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l.count(",") >= 4]
busy = [r for r in rows if float(r[2].split()[0]) > 150]
for r in busy: print(r[0][11:], r[1], r[2], r[4])
capped = [r for r in busy if int(r[4], 16) & 4]
print("%d samples under load, %d with the power cap active, SM clock %s-%s MHz" % (len(busy), len(capped),
      min((r[1].split()[0] for r in busy), key=int, default="-"), max((r[1].split()[0] for r in busy), key=int, default="-")))' "$OUT/clocks.csv"
}

phase_ops() {
  stamp "CUDA op timings at Llama-3-8B shapes"
  timeout 200 "$BUILD/bin/cuda_op_bench" 2>&1 | tee "$OUT/op_bench.log"
}

phase_batching() {
  stamp "issue 4: continuous vs static batching, shared-prefix TTFT"
  BUILD="$BUILD" OUT="$OUT" timeout 300 bash bench/gpu/serving.sh batching
}

phase_batching8b() {
  stamp "issue 4: continuous vs static batching, Llama-3-8B shape"
  BUILD="$BUILD" OUT="$OUT" timeout 450 bash bench/gpu/serving.sh batching8b
}

phase_http() {
  stamp "issue 5: HTTP server vs in-process engine"
  BUILD="$BUILD" OUT="$OUT" timeout 300 bash bench/gpu/serving.sh http
}

phase_profile() {
  # STRATA_PROFILE_DTYPE: the weights' --synthetic-dtype (bf16, int4-g128, int8, w8a8, fp8).
  local dt="${STRATA_PROFILE_DTYPE:-bf16}"
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --synthetic-dtype $dt --device cuda --json"
  for c in ${STRATA_PROFILE_SEQS:-128 32}; do
    for mode in ${STRATA_PROFILE_MODES:-eager graphs}; do
      stamp "op profile: $dt, $c concurrent sequences, 128 in / 128 out, $mode"
      local flag=""
      [ "$mode" = eager ] && flag="--enforce-eager"
      STRATA_CUDA_PROFILE=1 timeout 150 $S --num-requests $c --prompt-len-min 128 --prompt-len-max 128 \
        --output-len-min 128 --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 $flag \
        > "$OUT/profile_${dt}_${c}_${mode}.json" 2> "$OUT/profile_${dt}_${c}_${mode}.txt"
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("output tok/s %.0f  TPOT p50 %.2f ms  steps %d  forward ms/step %.2f" % (r["output_tokens_per_s"], r["tpot_ms"]["p50"], r["steps"], r["forward_ms_per_step"]))' "$OUT/profile_${dt}_${c}_${mode}.json"
      sed -n '/strata cuda op profile/,$p' "$OUT/profile_${dt}_${c}_${mode}.txt" | head -40
    done
  done
}

phase_logprobs() {
  stamp "engine sampling through the CUDA backend (device, host and logprobs rows)"
  timeout 120 "$BUILD/bin/cuda_engine_sampling_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_engine_sampling_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -20
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --temp 0.8 --top-p 0.9"
  local lines="$OUT/logprobs_bench.jsonl"
  : > "$lines"
  for c in ${STRATA_LOGPROBS_SEQS:-1 32 128}; do
    for mode in none logprobs; do
      local flags=""
      [ "$mode" = logprobs ] && flags="--logprobs 5"
      timeout 150 $S --num-requests $c --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 \
        --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 $flags 2>/dev/null | \
        python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["bench_mode"]=sys.argv[1]; print(json.dumps(r))' "$mode" \
        >> "$lines"
      python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readlines()[-1])
print("%4d seqs %-8s output tok/s %8.1f  TPOT p50 %.2f ms  host ms/step %.2f  overlapped %d/%d  host-sampled %d" % (
    r["requests"], r["bench_mode"], r["output_tokens_per_s"], r["tpot_ms"]["p50"], r["host_ms_per_step"],
    r["overlapped_steps"], r["steps"], r["host_sampled_steps"]))' "$lines"
    done
  done
}

phase_parallel() {
  stamp "NCCL communicator at one rank (cuda_comm_test; NCCL_NVLS_ENABLE=0)"
  NCCL_NVLS_ENABLE=0 timeout 120 "$BUILD/bin/cuda_comm_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_comm_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -20
  stamp "served greedy text at --tensor-parallel-size 1 --pipeline-parallel-size 1 vs without the flags"
  local model="$ROOT/.gpu/shared/models/stories260K/stories260K.gguf"
  for flags in "" "--tensor-parallel-size 1 --pipeline-parallel-size 1"; do
    "$BUILD/bin/strata" serve -m "$model" --device cuda --port 0 --no-warmup $flags > "$OUT/parallel_serve.out" 2>/dev/null &
    local pid=$! port=""
    for _ in $(seq 100); do
      port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$OUT/parallel_serve.out")
      [ -n "$port" ] && break
      sleep 0.2
    done
    curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt":"Once upon a time","max_tokens":64,"temperature":0}' | \
      python3 -c 'import json,sys; print(sys.argv[1] or "(no flags)", json.dumps(json.load(sys.stdin)["choices"][0]["text"]))' "$flags" | \
      tee -a "$OUT/parallel_text.log"
    kill -TERM $pid; wait $pid
  done
  [ "$(cut -d'"' -f2- "$OUT/parallel_text.log" | sort -u | wc -l)" = 1 ] && echo "same text" || echo "TEXT DIFFERS"
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  stamp "Llama-3-8B shape: batch-1 decode 128/128 and 32 sequences (compare with the figures before issue 30)"
  timeout 150 $S --prompt-tokens 128 --gen-tokens 128 -r 3 | tee "$OUT/parallel_bench_decode.json"
  timeout 150 $S --num-requests 32 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 \
    --output-len-max 128 --max-num-seqs 32 --max-batched-tokens 8192 | tee "$OUT/parallel_bench_serving_32.json"
}

phase_quant() {
  stamp "quantized matmul tests (float64 contract reference)"
  timeout 240 "$BUILD/bin/cuda_quant_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_quant_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -40
  grep -qE "FAILED|Failure" "$OUT/cuda_quant_test.log" && { stamp "quantized matmul tests failed: stopping"; exit 1; }
  stamp "8-bit KV caches (cuda_kv8_test: kernel paths vs float64, engine greedy vs F32 cache; conformance vs float64)"
  timeout 240 "$BUILD/bin/cuda_kv8_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_kv8_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -20
  timeout 240 "$BUILD/bin/backend_conformance_test" --gtest_color=no --gtest_filter='*Attention*' 2>&1 | \
    tee "$OUT/conformance_attention.log" | grep -E "kv8|note|FAILED|Failure|PASSED" | tail -20
  grep -qE "FAILED|Failure" "$OUT/cuda_kv8_test.log" "$OUT/conformance_attention.log" && \
    stamp "8-bit KV cache tests failed (see cuda_kv8_test.log, conformance_attention.log)"
  stamp "Llama-3-8B step weight products per format, beside BF16"
  timeout 300 "$BUILD/bin/quant_matmul_bench" --tokens "${STRATA_QUANT_TOKENS:-1,128,4096}" \
    --formats "${STRATA_QUANT_FORMATS:-bf16,w4a16,w8a16,w8a8,fp8}" 2>&1 | tee "$OUT/quant_bench.jsonl"
}

phase_quant8b() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local t_start=$SECONDS d
  # run OUTFILE LIMIT ARGS...: one bench run, skipped (said so) when it could take the phase
  # past its 8-minute budget.
  run() {
    local out=$1 limit=$2
    shift 2
    if (( SECONDS - t_start + limit > 480 )); then stamp "skipped $out: the phase's 8 minutes"; return; fi
    timeout "$limit" "$@" | tee "$OUT/$out"
  }
  stamp "weight products of a Llama-3-8B step, 1 and 8 tokens: tensor-core GEMV, then the SIMT one (v1)"
  run quant8b_matmul.jsonl 90 "$BUILD/bin/quant_matmul_bench" --tokens 1,8,128 --formats bf16,w4a16,w8a16
  STRATA_CUDA_QGEMV=v1 run quant8b_matmul_v1.jsonl 60 "$BUILD/bin/quant_matmul_bench" --tokens 1,8 \
    --formats w4a16,w8a16
  stamp "quantized Llama-3-8B shape: batch-1 decode 128 in / 128 out (decode graphs), bf16 / W4A16 / W8A16"
  for d in bf16 int4-g128 int8; do
    run "quant8b_decode_$d.json" 60 $S --synthetic-dtype $d --prompt-tokens 128 --gen-tokens 128 -r 3
  done
  stamp "128 concurrent sequences, 128 in / 128 out: bf16 / W8A8 / FP8"
  for d in bf16 w8a8 fp8; do
    run "quant8b_serving128_$d.json" 60 $S --synthetic-dtype $d --num-requests 128 --prompt-len-min 128 \
      --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192
  done
  stamp "4096-token prefill: bf16 / W8A8"
  for d in bf16 w8a8; do
    run "quant8b_prefill_$d.json" 50 $S --synthetic-dtype $d --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3
  done
  stamp "tensor-core GEMV variants, 1 token: 4 warps per tile (STRATA_CUDA_QGEMV_KW, default 8), rounds of 2 loads (STRATA_CUDA_QGEMV_ROUND, default 3), x not staged (STRATA_CUDA_QGEMV_STAGE=0)"
  local M=("$BUILD/bin/quant_matmul_bench" --tokens 1 --formats w4a16,w8a16 --reps 10)
  STRATA_CUDA_QGEMV_KW=4 run quant8b_matmul_kw4.jsonl 40 "${M[@]}"
  STRATA_CUDA_QGEMV_ROUND=2 run quant8b_matmul_round2.jsonl 40 "${M[@]}"
  STRATA_CUDA_QGEMV_STAGE=0 run quant8b_matmul_unstaged.jsonl 40 "${M[@]}"
  stamp "W4A16 decode with the SIMT GEMV (STRATA_CUDA_QGEMV=v1), for the A/B"
  STRATA_CUDA_QGEMV=v1 run "quant8b_decode_int4-g128_v1.json" 60 $S --synthetic-dtype int4-g128 \
    --prompt-tokens 128 --gen-tokens 128 -r 3
  stamp "quant8b: $(( SECONDS - t_start ))s"
}

# quant8b's short form (under 4 minutes): the tiled-GEMV tests, the 1- and 8-token weight
# products with x staged in shared memory and without (STRATA_CUDA_QGEMV_STAGE=0), and the
# W4A16 / W8A16 batch-1 decodes end to end.
phase_quant8b_quick() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" d
  stamp "tiled GEMV tests"
  timeout 60 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.Tiled*:CudaQuant.Int4*:CudaQuant.Int8*' \
    2>&1 | tee "$OUT/cuda_quant_test_tiled.log" | grep -vE "^\[ RUN|^\[       OK" | tail -15
  stamp "weight products, 1, 8 and 128 tokens (x staged in shared memory), then 1 token not staged"
  timeout 60 "$BUILD/bin/quant_matmul_bench" --tokens 1,8,128 --formats w4a16,w8a16 --reps 10 | tee "$OUT/quant8b_matmul_staged.jsonl"
  STRATA_CUDA_QGEMV_STAGE=0 timeout 50 "$BUILD/bin/quant_matmul_bench" --tokens 1 --formats w4a16,w8a16 --reps 10 | \
    tee "$OUT/quant8b_matmul_unstaged.jsonl"
  stamp "batch-1 decode 128/128, W4A16 and W8A16"
  for d in int4-g128 int8; do
    timeout 50 $S --synthetic-dtype $d --prompt-tokens 128 --gen-tokens 128 -r 3 | tee "$OUT/quant8b_decode_$d.json"
  done
}

# The streaming W4A16 / W8A16 GEMV (kernels/cuda/quant_gemv_stream.cu, issue 28 items 1-2;
# about 4 minutes): its tests at every launch configuration, the variant sweep per
# Llama-3-8B product shape (bench/cuda/qgemv_sweep.cu: picks the defaults), then batch-1
# decode 128/128 end to end, bf16 / W4A16 / W8A16 (qgemv_ab: the A/Bs).
phase_qgemv() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" d
  stamp "streaming GEMV tests (every configuration) and the tiled-GEMV tests"
  timeout 120 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.Stream*:CudaQuant.Tiled*' \
    2>&1 | tee "$OUT/qgemv_test.log" | grep -vE "^\[ RUN|^\[       OK|worst error" | tail -15
  stamp "GEMV variant sweep (qgemv_sweep.jsonl)"
  timeout 180 "$BUILD/bin/qgemv_sweep" --reps 20 > "$OUT/qgemv_sweep.jsonl" 2>&1
  grep -E "qgemv_sweep_best|error" "$OUT/qgemv_sweep.jsonl"
  grep -E '"variant":"(mma|default|read)"' "$OUT/qgemv_sweep.jsonl"
  stamp "batch-1 decode 128/128: bf16, W4A16 g128, W8A16 (streaming GEMV: STRATA_CUDA_QGEMV_KERNEL=stream)"
  for d in bf16 int4-g128 int8; do
    STRATA_CUDA_QGEMV_KERNEL=stream timeout 90 $S --synthetic-dtype $d --prompt-tokens 128 --gen-tokens 128 -r 3 | \
      tee "$OUT/qgemv_decode_$d.json"
  done
}

# qgemv's short form for a call of about 90 seconds, everything in one file
# ($OUT/cuda-gemv_final.txt): the streaming GEMV's tests (pass/fail lines), the quick sweep
# at 1 and 8 tokens, then W4A16 batch-1 decode with the streaming GEMV
# (STRATA_CUDA_QGEMV_KERNEL=stream; the default stays the tensor-core GEMV until measured).
phase_qgemv_final() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" F="$OUT/cuda-gemv_final.txt"
  stamp "streaming GEMV tests" | tee -a "$F"
  timeout 40 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.Stream*' 2>&1 | \
    grep -E "^\[  PASSED|^\[  FAILED|^\[==========\]|Failure|Expected|Which is|vs reference|elements off" | head -40 | tee -a "$F"
  stamp "quick GEMV sweep, 1 and 8 tokens" | tee -a "$F"
  timeout 45 "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1,8 --quick 1 >> "$F" 2>&1
  grep qgemv_sweep_best "$F"
  stamp "W4A16 batch-1 decode 128/128 with the streaming GEMV" | tee -a "$F"
  STRATA_CUDA_QGEMV_KERNEL=stream timeout 60 $S --synthetic-dtype int4-g128 --prompt-tokens 128 --gen-tokens 128 \
    -r 1 2>&1 | tail -3 | tee -a "$F"
}

# The A/Bs of qgemv's decode figures (about 3 minutes): W4A16 / W8A16 with the previous
# tensor-core GEMV (STRATA_CUDA_QGEMV_KERNEL=mma) and with the prologues not fused
# (STRATA_CUDA_QGEMV_FUSE=0).
phase_qgemv_ab() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" d
  stamp "batch-1 decode 128/128 with the tensor-core GEMV (STRATA_CUDA_QGEMV_KERNEL=mma, the default)"
  for d in int4-g128 int8; do
    STRATA_CUDA_QGEMV_KERNEL=mma timeout 90 $S --synthetic-dtype $d --prompt-tokens 128 --gen-tokens 128 -r 3 | \
      tee "$OUT/qgemv_decode_${d}_mma.json"
  done
  stamp "batch-1 decode 128/128, streaming GEMV without the fused prologues (STRATA_CUDA_QGEMV_FUSE=0)"
  for d in int4-g128 int8; do
    STRATA_CUDA_QGEMV_KERNEL=stream STRATA_CUDA_QGEMV_FUSE=0 timeout 90 $S --synthetic-dtype $d --prompt-tokens 128 --gen-tokens 128 -r 3 | \
      tee "$OUT/qgemv_decode_${d}_unfused.json"
  done
}

# run_budget OUTFILE LIMIT ARGS...: one run, skipped (said so) when it could take the phase
# past $budget seconds from $t_start.
run_budget() {
  local out=$1 limit=$2
  shift 2
  if (( SECONDS - t_start + limit > budget )); then stamp "skipped $out: the phase's ${budget}s"; return; fi
  timeout "$limit" "$@" | tee "$OUT/$out"
}

phase_w8a8() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" d
  local t_start=$SECONDS budget=190
  stamp "8-bit product tests (wgmma / cuBLASLt GEMMs, fused prologue, counters; float64 reference)"
  timeout 100 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.W8A8*:CudaQuant.Fp8*:CudaQuant.EightBit*:CudaQuant.FusedPrologue*:CudaQuant.MatmulEx*:CudaQuant.Counters*:CudaQuant.OutlierSplit*' \
    2>&1 | tee "$OUT/w8a8_test.log" | grep -vE "^\[ RUN|^\[       OK" | tail -30
  stamp "a Llama-3-8B step's products as the model issues them (matmul_ex), 128 and 4096 tokens"
  run_budget w8a8_layer.jsonl 60 "$BUILD/bin/quant_matmul_bench" --ops layer --tokens 128,4096 \
    --formats bf16,w8a8,fp8 --reps 10
  stamp "128 concurrent sequences 128/128 and 4096-token prefill, W8A8 / FP8 (bf16 last, if time is left)"
  for d in w8a8 fp8; do
    run_budget "w8a8_serving128_$d.json" 45 $S --synthetic-dtype $d --num-requests 128 --prompt-len-min 128 \
      --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192
  done
  run_budget w8a8_prefill_w8a8.json 40 $S --synthetic-dtype w8a8 --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3
  run_budget w8a8_serving128_bf16.json 40 $S --synthetic-dtype bf16 --num-requests 128 --prompt-len-min 128 \
    --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192
  stamp "w8a8: $(( SECONDS - t_start ))s"
}

phase_w8a8_ab() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" v
  local t_start=$SECONDS budget=300
  local M=("$BUILD/bin/quant_matmul_bench" --ops layer --formats w8a8,fp8 --reps 10)
  stamp "GPU time per op of one eager step (STRATA_CUDA_PROFILE=1), 128 and 4096 tokens"
  STRATA_CUDA_PROFILE=1 timeout 50 "$BUILD/bin/quant_matmul_bench" --ops layer --formats bf16,w8a8,fp8 --reps 3 \
    --tokens 128,4096 > "$OUT/w8a8_profile.txt" 2>&1
  grep -E "matmul|quant|graph" "$OUT/w8a8_profile.txt" | head -40
  stamp "op profile of the 128-sequence W8A8 run, eager (compare with profile_w8a8_128_eager of main 11ad1eb)"
  STRATA_CUDA_PROFILE=1 timeout 60 $S --synthetic-dtype w8a8 --num-requests 128 --prompt-len-min 128 \
    --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192 \
    --enforce-eager > "$OUT/w8a8_profile_128_eager.json" 2> "$OUT/w8a8_profile_128_eager.txt"
  sed -n '/strata cuda op profile/,$p' "$OUT/w8a8_profile_128_eager.txt" | head -24
  stamp "products: previous path (cuBLASLt + epilogue kernel, separate quantize) and wgmma at every size"
  run_budget w8a8_layer_cublas.jsonl 50 "${M[@]}" --tokens 128,4096 --device-options "quant_gemm=cublas;quant_fuse=off"
  run_budget w8a8_layer_wgmma.jsonl 40 "${M[@]}" --tokens 4096 --device-options "quant_gemm=wgmma"
  stamp "end to end: W8A8 128 sequences on the previous path, W8A8 prefill with wgmma at 4096 tokens"
  STRATA_CUDA_QUANT_GEMM=cublas STRATA_CUDA_QUANT_FUSE=off run_budget w8a8_serving128_w8a8_prev.json 45 $S \
    --synthetic-dtype w8a8 --num-requests 128 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 \
    --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192
  STRATA_CUDA_QUANT_GEMM=wgmma run_budget w8a8_prefill_w8a8_wgmma.json 40 $S --synthetic-dtype w8a8 \
    --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3
  STRATA_CUDA_QUANT_GEMM=wgmma run_budget w8a8_serving128_w8a8_wgmma.json 45 $S --synthetic-dtype w8a8 \
    --num-requests 128 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 \
    --max-num-seqs 128 --max-batched-tokens 8192
  stamp "products with the fused prologue but cuBLASLt (the two changes apart), if time is left"
  run_budget w8a8_layer_cublas_fused.jsonl 45 "${M[@]}" --tokens 128,4096 --device-options "quant_gemm=cublas"
  stamp "w8a8_ab: $(( SECONDS - t_start ))s"
}

# The follow-up of the w8a8 run (under 90 s, everything in one file, cuda-w8a8_final.txt): GPU
# time of the activation quantization (with its prologue) and of the 8-bit product apart, per
# product (STRATA_CUDA_PROFILE=1: quant_product.cpp splits the op's sample), for the wgmma GEMM
# at 128 tokens and cuBLASLt at 4096 (defaults), cuBLASLt at 128 and wgmma at 4096; then an
# Nsight Compute speed-of-light pass over layer 0's kernels at 128 tokens.
phase_w8a8_final() {
  local F="$OUT/cuda-w8a8_final.txt"
  local M=("$BUILD/bin/quant_matmul_bench" --ops layer --formats w8a8 --reps 5)
  local keep='quantize activations|quantized|graph_launch|^\{|strata cuda op profile|total_ms|quant_matmul_bench:'
  {
    stamp "A: defaults (wgmma at 128, cuBLASLt at 4096), profiled"
    STRATA_CUDA_PROFILE=1 timeout 25 "${M[@]}" --tokens 128,4096 2>&1 | grep -E "$keep"
    stamp "B: quant_gemm=cublas at 128, profiled"
    STRATA_CUDA_PROFILE=1 timeout 18 "${M[@]}" --tokens 128 --device-options quant_gemm=cublas 2>&1 | grep -E "$keep"
    stamp "C: quant_gemm=wgmma at 4096, profiled"
    STRATA_CUDA_PROFILE=1 timeout 20 "${M[@]}" --tokens 4096 --device-options quant_gemm=wgmma 2>&1 | grep -E "$keep"
    stamp "D: ncu speed of light, layer 0 at 128 tokens (prologue + GEMM per product)"
    [ -x /usr/local/cuda/bin/ncu ] && timeout 25 /usr/local/cuda/bin/ncu --kernel-name regex:'WgmmaGemm|QuantPrologue' \
      --launch-count 8 --section SpeedOfLight "${M[@]}" --tokens 128 2>&1 | \
      grep -E "WgmmaGemm|QuantPrologue|Duration|Throughput|==PROF==|==ERROR==" | head -60
    stamp "w8a8_final done"
  } > "$F" 2>&1
  cat "$F"
}

# One Nsight Compute profile of the 8-bit wgmma GEMM at 128 tokens (the gate_up and down
# products of layer 0 in quant_matmul_bench's first, eager, step): speed of light, memory
# and warp-state sections (w8a8_ncu.txt; about a minute).
phase_w8a8_ncu() {
  local NCU=/usr/local/cuda/bin/ncu
  [ -x "$NCU" ] || { stamp "no ncu at $NCU"; return; }
  stamp "ncu: WgmmaGemmKernel (s8), gate_up and down of layer 0 at 128 tokens"
  timeout 150 "$NCU" --kernel-name regex:WgmmaGemmKernel --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    "$BUILD/bin/quant_matmul_bench" --ops layer --tokens 128 --formats w8a8 --reps 3 > "$OUT/w8a8_ncu.txt" 2>&1
  grep -E "Duration|Throughput|DRAM|L2 Hit|Stall|Occupancy|Registers" "$OUT/w8a8_ncu.txt" | head -40
}

# Issue 28, the 4,096-token W8A8 prefill (helper cuda-prefill; STRATA_PREFILL_BUDGET seconds,
# default 120, which holds the tests and two prefill figures: each `strata bench --synthetic
# llama3-8b` takes ~30 s, most of it making the model; 300 runs everything; a step starts only with 10 s left and is cut at the budget; everything in
# $OUT/cuda-prefill_*.txt): the 8-bit cuda_quant_test cases (1 .. 4,096 tokens), the
# end-to-end prefill figures (w8a8, w8a8 with the GEMM's multicast pairs, fp8, bf16), the
# W8A8 prefill op by op (eager, STRATA_CUDA_PROFILE=1: the activation quantization apart from
# each product), the products at 4,096 tokens per GEMM choice, 128 sequences W8A8.
phase_w8a8_prefill() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" d
  local P="--prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096"
  local t_start=$SECONDS budget=${STRATA_PREFILL_BUDGET:-120}
  local M=("$BUILD/bin/quant_matmul_bench" --ops layer --tokens 4096 --reps 5)
  pb() {  # pb NAME LIMIT CMD...: CMD's stdout and stderr into cuda-prefill_NAME.txt, within the budget
    local name=$1 limit=$2 left
    shift 2
    left=$(( budget - (SECONDS - t_start) ))
    if (( left < 10 )); then stamp "skipped $name: the phase's ${budget}s"; return; fi
    (( limit > left )) && limit=$left
    stamp "$name (limit ${limit}s)"
    timeout "$limit" "$@" > "$OUT/cuda-prefill_$name.txt" 2>&1
    echo "rc=$? at $(( SECONDS - t_start ))s" >> "$OUT/cuda-prefill_$name.txt"
  }
  figure() { grep -oE '"prefill_tokens_per_s": *[0-9.]+' "$OUT/cuda-prefill_$1.txt"; tail -1 "$OUT/cuda-prefill_$1.txt"; }
  pb test 60 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.W8A8*:CudaQuant.Fp8*:CudaQuant.EightBit*:CudaQuant.FusedPrologue*:CudaQuant.MatmulEx*:CudaQuant.Counters*-CudaQuant.EightBitGemmPrefillOptions*'
  grep -E "FAILED|PASSED|Failure|worst error.*n=4096" "$OUT/cuda-prefill_test.txt" | head -24; tail -1 "$OUT/cuda-prefill_test.txt"
  pb test_bf16_wgmma 15 "$BUILD/bin/cuda_backend_test" --gtest_color=no --gtest_filter='CudaWgmmaGemm.*'
  grep -E "FAILED|PASSED|Failure" "$OUT/cuda-prefill_test_bf16_wgmma.txt" | head -8; tail -1 "$OUT/cuda-prefill_test_bf16_wgmma.txt"
  for d in w8a8 fp8 bf16; do pb "e2e_$d" 50 $S --synthetic-dtype $d $P -r 3; figure "e2e_$d"; done
  pb test_options 40 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.EightBitGemmPrefillOptions*'
  grep -E "FAILED|PASSED|Failure" "$OUT/cuda-prefill_test_options.txt" | head -8; tail -1 "$OUT/cuda-prefill_test_options.txt"
  STRATA_CUDA_WGMMA_MULTICAST=on pb e2e_w8a8_multicast 50 $S --synthetic-dtype w8a8 $P -r 3; figure e2e_w8a8_multicast
  STRATA_CUDA_WGMMA_PERSISTENT=on pb e2e_w8a8_persistent 50 $S --synthetic-dtype w8a8 $P -r 3; figure e2e_w8a8_persistent
  STRATA_CUDA_PROFILE=1 pb profile_w8a8 50 $S --synthetic-dtype w8a8 $P -r 1 --enforce-eager
  sed -n '/strata cuda op profile/,$p' "$OUT/cuda-prefill_profile_w8a8.txt" | head -30
  STRATA_CUDA_PROFILE=1 pb products_auto 25 "${M[@]}" --formats w8a8,fp8
  grep -E "quantize activations|^\{" "$OUT/cuda-prefill_products_auto.txt" | head -20
  local v
  for v in multicast:wgmma_multicast=on persistent:wgmma_persistent=on bn128:wgmma_token_tile=128 \
      all:"wgmma_token_tile=128;wgmma_multicast=on;wgmma_persistent=on" mp:"wgmma_multicast=on;wgmma_persistent=on"; do
    STRATA_CUDA_PROFILE=1 pb "products_w8a8_${v%%:*}" 20 "${M[@]}" --formats w8a8 --device-options "${v#*:}"
    grep -E "^\{" "$OUT/cuda-prefill_products_w8a8_${v%%:*}.txt"
  done
  pb products_fp8_wgmma 20 "${M[@]}" --formats fp8 --device-options quant_gemm=wgmma
  grep -E "^\{" "$OUT/cuda-prefill_products_fp8_wgmma.txt"
  pb serving128_w8a8 40 $S --synthetic-dtype w8a8 --num-requests 128 --prompt-len-min 128 --prompt-len-max 128 \
    --output-len-min 128 --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192
  grep -oE '"output_tokens_per_s": *[0-9.]+' "$OUT/cuda-prefill_serving128_w8a8.txt"
  stamp "w8a8_prefill: $(( SECONDS - t_start ))s"
}

# Issue 28, the activation quantization kernels (kernels/cuda/quant_prologue.cu's
# QuantPrologueRegKernel, the prologue + per-token quantization before each 8-bit product; the
# default since helper cuda-quant2 fixed its rounding: q = v / scale bit for bit, not
# v * (1 / scale); STRATA_CUDA_QUANT_PROLOGUE=v1 selects the previous kernel).
# CUDA_QUANT_BUDGET seconds (default 200); a step starts only if its own minimum fits in what
# is left and is cut at the budget; results in $OUT/cuda-quant_*.txt. In order:
#   1. the 8-bit tests that exercise the kernel, once, under the default (about 40 s: the fused
#      prologue vs the float64 composed reference up to 4,096 tokens, FP8 / W8A8 products, the
#      new half-way-quotient test, counters); every failure message and the fp8 rms_norm and
#      half-way lines printed;
#   2. end to end under the default: the 4,096-token prefill and 128 sequences 128/128, W8A8
#      then FP8 (about 30 s each: most of it making the synthetic model);
#   3. (budget permitting: ~240 s) a step's products profiled (the quantize kernels' times),
#      default then v1; (~400 s) the four end-to-end figures under
#      STRATA_CUDA_QUANT_PROLOGUE=v1; SASS counts where cuobjdump is.
phase_cuda_quant() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local P="--prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096"
  local SV="--num-requests 128 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192"
  local t_start=$SECONDS budget=${CUDA_QUANT_BUDGET:-200}
  cq() {  # cq NAME LIMIT MIN CMD...: CMD's stdout and stderr into cuda-quant_NAME.txt if MIN s are left
    local name=$1 limit=$2 min=$3 left
    shift 3
    left=$(( budget - (SECONDS - t_start) ))
    if (( left < min )); then stamp "skipped $name: ${left}s of the phase's ${budget}s left"; return 1; fi
    (( limit > left )) && limit=$left
    stamp "$name (limit ${limit}s)"
    timeout "$limit" "$@" > "$OUT/cuda-quant_$name.txt" 2>&1
    echo "rc=$? at $(( SECONDS - t_start ))s" >> "$OUT/cuda-quant_$name.txt"
  }
  e2e() {  # e2e SUFFIX: the four end-to-end figures under the current STRATA_CUDA_QUANT_PROLOGUE
    local d
    for d in w8a8 fp8; do
      cq "prefill_$d$1" 50 35 $S --synthetic-dtype $d $P -r 3 && \
        echo "prefill $d$1: $(grep -oE '"prefill_tokens_per_s": *[0-9.]+' "$OUT/cuda-quant_prefill_$d$1.txt") $(tail -1 "$OUT/cuda-quant_prefill_$d$1.txt")"
      cq "serving128_$d$1" 50 35 $S --synthetic-dtype $d $SV && \
        echo "serving128 $d$1: $(grep -oE '"output_tokens_per_s": *[0-9.]+' "$OUT/cuda-quant_serving128_$d$1.txt") $(tail -1 "$OUT/cuda-quant_serving128_$d$1.txt")"
    done
  }
  unset STRATA_CUDA_QUANT_PROLOGUE
  cq test 90 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.FusedPrologue*:CudaQuant.Fp8*:CudaQuant.W8A8*:CudaQuant.Counters*'
  grep -E -A4 "Failure" "$OUT/cuda-quant_test.txt" | head -60
  grep -E "fp8 rms_norm .*worst error|half-way.*worst error|^\[  (FAILED|PASSED)|suites? ran" "$OUT/cuda-quant_test.txt" | head -60
  tail -1 "$OUT/cuda-quant_test.txt"
  e2e ""
  local v
  for v in v2 v1; do
    STRATA_CUDA_QUANT_PROLOGUE=$v STRATA_CUDA_PROFILE=1 cq "products_$v" 25 15 "$BUILD/bin/quant_matmul_bench" --ops layer \
      --formats w8a8,fp8 --tokens 128,4096 --reps 3 && \
      grep -E "quantize activations|^\{" "$OUT/cuda-quant_products_$v.txt" | head -30
  done
  export STRATA_CUDA_QUANT_PROLOGUE=v1
  e2e _v1
  unset STRATA_CUDA_QUANT_PROLOGUE
  local obj; obj=$(find "$BUILD" -name 'quant_prologue.cu.o' | head -1)
  if [ -n "$obj" ] && [ -x /usr/local/cuda/bin/cuobjdump ]; then
    /usr/local/cuda/bin/cuobjdump -sass "$obj" | awk '
      /Function :/ {f=$3; next}
      /^ *\/\*[0-9a-f]+\*\/ / && f ~ /QuantPrologueReg/ {n[f]++; if ($0 ~ /MUFU/) m[f]++; if ($0 ~ /CALL/) c[f]++}
      END {for (k in n) print k, "sass=" n[k], "mufu=" m[k]+0, "call=" c[k]+0}' | c++filt | \
      sed 's/.*QuantPrologueRegKernel/RegKernel/; s/(strata::cuda::QuantActArgs)//' | sort > "$OUT/cuda-quant_sass.txt"
    grep -E "bfloat16, [012], (256, 4|448, 4|1024, 1|1024, 2)" "$OUT/cuda-quant_sass.txt"
  fi
  stamp "cuda_quant: $(( SECONDS - t_start ))s"
}

# The final check of helper cuda-quant2's fix (CUDA_QUANT_FINAL_BUDGET s, default 95; files
# $OUT/cuda-quant-final_*.txt): the 8-bit tests once under the default kernel (~26 s), then a
# step's products profiled per format (the quantize kernels' own times, which a run over both
# formats mixes into one median), default then STRATA_CUDA_QUANT_PROLOGUE=v1, W8A8 then FP8
# (~10 s each), then the W8A8 4,096-token prefill if 30 s are left.
phase_cuda_quant_final() {
  local t_start=$SECONDS budget=${CUDA_QUANT_FINAL_BUDGET:-95} v f
  cqf() {  # cqf NAME LIMIT MIN CMD...: as phase_cuda_quant's cq, into cuda-quant-final_NAME.txt
    local name=$1 limit=$2 min=$3 left
    shift 3
    left=$(( budget - (SECONDS - t_start) ))
    if (( left < min )); then stamp "skipped $name: ${left}s of the phase's ${budget}s left"; return 1; fi
    (( limit > left )) && limit=$left
    stamp "$name (limit ${limit}s)"
    timeout "$limit" "$@" > "$OUT/cuda-quant-final_$name.txt" 2>&1
    echo "rc=$? at $(( SECONDS - t_start ))s" >> "$OUT/cuda-quant-final_$name.txt"
  }
  unset STRATA_CUDA_QUANT_PROLOGUE
  cqf test 50 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.FusedPrologue*:CudaQuant.Fp8*:CudaQuant.W8A8*:CudaQuant.Counters*'
  grep -E -A4 "Failure" "$OUT/cuda-quant-final_test.txt" | head -40
  grep -E "(fp8|w8a8) rms_norm .*bf16;quant_fuse=on .*worst error|half-way.*bf16.*worst error|^\[  (FAILED|PASSED)|suites? ran" \
    "$OUT/cuda-quant-final_test.txt" | head -40
  tail -1 "$OUT/cuda-quant-final_test.txt"
  for v in v2 v1; do
    for f in w8a8 fp8; do
      STRATA_CUDA_QUANT_PROLOGUE=$v STRATA_CUDA_PROFILE=1 cqf "products_${f}_$v" 20 8 "$BUILD/bin/quant_matmul_bench" \
        --ops layer --formats $f --tokens 128,4096 --reps 3 && \
        grep -E "quantize activations|^\{" "$OUT/cuda-quant-final_products_${f}_$v.txt" | sed "s/^/$f $v: /" | head -12
    done
  done
  cqf prefill_w8a8 40 30 "$BUILD/bin/strata" bench --synthetic llama3-8b --device cuda --json --synthetic-dtype w8a8 \
    --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3 && \
    echo "prefill w8a8: $(grep -oE '"prefill_tokens_per_s": *[0-9.]+' "$OUT/cuda-quant-final_prefill_w8a8.txt") $(tail -1 "$OUT/cuda-quant-final_prefill_w8a8.txt")"
  stamp "cuda_quant_final: $(( SECONDS - t_start ))s"
}

phase_kv8() {
  stamp "8-bit KV caches: every attention kernel path vs float64, engine greedy vs F32 cache"
  timeout 200 "$BUILD/bin/cuda_kv8_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_kv8_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -50
  stamp "the GQA decode kernel's wide 8-bit form (STRATA_CUDA_GQA_KV8=wide; the narrow one is the default)"
  STRATA_CUDA_GQA_KV8=wide timeout 100 "$BUILD/bin/cuda_kv8_test" --gtest_color=no --gtest_filter='CudaKv8Ops.DecodeGqa*' \
    2>&1 | tee "$OUT/cuda_kv8_test_wide.log" | grep -E "kv8 ops|FAILED|Failure|PASSED" | tail -12
  timeout 200 "$BUILD/bin/backend_conformance_test" --gtest_color=no --gtest_filter='*Attention*/cuda' 2>&1 | \
    tee "$OUT/kv8_conformance_attention.log" | grep -E "note|FAILED|Failure|PASSED" | tail -20
  grep -qE "FAILED|Failure" "$OUT/cuda_kv8_test.log" "$OUT/kv8_conformance_attention.log" && \
    stamp "8-bit KV cache tests failed (see cuda_kv8_test.log, kv8_conformance_attention.log)"
  grep -qE "FAILED|Failure" "$OUT/cuda_kv8_test_wide.log" && stamp "the wide form failed (cuda_kv8_test_wide.log)"
  stamp "decode attention alone (attention, rope_attention): 1 and 32 sequences x 4,096 tokens, BF16 / FP8 / I8 caches"
  STRATA_OP_BENCH=decode_attention STRATA_OP_BENCH_KV_DTYPES=bf16,fp8,int8 STRATA_OP_BENCH_DECODE_CONTEXT=4096 \
    timeout 150 "$BUILD/bin/cuda_op_bench" 2>&1 | tee "$OUT/kv8_attention_bench.jsonl"
  stamp "the same, fp8 / int8 with the GQA kernel's wide 8-bit form"
  STRATA_CUDA_GQA_KV8=wide STRATA_OP_BENCH=decode_attention STRATA_OP_BENCH_KV_DTYPES=fp8,int8 \
    STRATA_OP_BENCH_DECODE_CONTEXT=4096 timeout 100 "$BUILD/bin/cuda_op_bench" 2>&1 | grep '"gqa"' | \
    tee "$OUT/kv8_attention_bench_wide.jsonl"
  stamp "decode step alone, op by op (no graphs, every sequence decoding): 32 x 4,096 tokens, BF16 / FP8 / I8 KV"
  : > "$OUT/kv8_step.jsonl"
  for kv in bf16 fp8 int8 fp8-wide; do
    local env=""
    [ "$kv" = fp8-wide ] && env="STRATA_CUDA_GQA_KV8=wide"
    env $env timeout 120 "$BUILD/bin/decode_step_bench" --plugin "$BUILD/bin/libstrata-backend-cuda.so" \
      --options activations=bf16 --shape llama3-8b --format bf16 --act bf16 --kv-dtype ${kv%-wide} --mode decode \
      --batch 32 --context 4096 --reps 10 | sed "s/\"kv_dtype\":\"fp8\"/\"kv_dtype\":\"$kv\"/" | tee -a "$OUT/kv8_step.jsonl"
  done
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
base = next((r["median_ms"] for r in rows if r["kv_dtype"] == "bf16"), None)
for r in rows: print("kv %-5s decode step %.2f ms (%s of bf16)" % (r["kv_dtype"], r["median_ms"], "%.3f" % (r["median_ms"] / base) if base else "-"))' "$OUT/kv8_step.jsonl"
  # The engine's TPOT includes the steps where a sequence decodes beside other prompts'
  # prefill chunks (the 32 prompts take 16 steps of 8,192 tokens), so it also carries the
  # prefill kernels' speed; the op-by-op step above is the decode step alone.
  stamp "decode TPOT p50: 32 sequences x 4,096-token prompts, 128 out, BF16 / FP8 / I8 KV (Llama-3-8B shape)"
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  : > "$OUT/kv8_tpot.jsonl"
  for kv in auto fp8 int8; do
    timeout 120 $S --num-requests 32 --prompt-len-min 4096 --prompt-len-max 4096 --output-len-min 128 \
      --output-len-max 128 --max-num-seqs 32 --max-batched-tokens 8192 --kv-dtype $kv 2>"$OUT/kv8_tpot_$kv.err" | \
      python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["kv_dtype"]=sys.argv[1]; print(json.dumps(r))' "$kv" \
      >> "$OUT/kv8_tpot.jsonl" || tail -3 "$OUT/kv8_tpot_$kv.err"
  done
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = next((r["tpot_ms"]["p50"] for r in rows if r["kv_dtype"] == "auto"), None)
for r in rows:
  t = r["tpot_ms"]["p50"]
  print("kv %-5s TPOT p50 %.2f ms (%s of bf16)  output tok/s %.0f" % (r["kv_dtype"], t,
        "%.3f" % (t / base) if base else "-", r["output_tokens_per_s"]))' "$OUT/kv8_tpot.jsonl"
  stamp "stories260K perplexity with f32 / fp8 / int8 KV caches, CUDA vs CPU"
  local model="$ROOT/.gpu/shared/models/stories260K/stories260K.gguf" text="$ROOT/.gpu/shared/text/tinystories_sample.txt"
  if [ ! -f "$text" ]; then
    stamp "no $text: perplexity skipped (copy ../shared/text/tinystories_sample.txt there)"
    return
  fi
  : > "$OUT/kv8_ppl.jsonl"
  for dev in cuda cpu; do
    for kv in f32 fp8 int8; do
      timeout 60 "$BUILD/bin/strata" perplexity -m "$model" -f "$text" --ctx 128 --json --device $dev --kv-dtype $kv \
        2>/dev/null | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["device"]=sys.argv[1]; r["kv_dtype"]=sys.argv[2]; print(json.dumps(r))' "$dev" "$kv" \
        >> "$OUT/kv8_ppl.jsonl"
    done
  done
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ppl = {(r["device"], r["kv_dtype"]): r["ppl"] for r in rows}
for kv in ("f32", "fp8", "int8"):
  c, p = ppl.get(("cuda", kv)), ppl.get(("cpu", kv))
  print("kv %-4s ppl cuda %s cpu %s  cuda/cpu %s" % (kv, c, p, "%.4f" % (c / p) if c and p else "-"))' "$OUT/kv8_ppl.jsonl"
}

# The follow-up of run 1 (2026-12-02): the 8-bit paths after the I8 conversion change, and the
# GQA kernel's wide 8-bit form (STRATA_CUDA_GQA_KV8=wide) beside the default narrow one; FP8
# perplexity with F32 activations (is CUDA's +1.45% over the CPU the BF16 rounding of K/V
# before E4M3?). About 3 minutes.
phase_kv8quick() {
  stamp "8-bit op tests (every kernel path), then the GQA decode tests with the wide form"
  timeout 100 "$BUILD/bin/cuda_kv8_test" --gtest_color=no --gtest_filter='CudaKv8Ops.*' 2>&1 | \
    tee "$OUT/kv8q_ops.log" | grep -E "kv8 ops|FAILED|Failure|PASSED" | tail -30
  STRATA_CUDA_GQA_KV8=wide timeout 60 "$BUILD/bin/cuda_kv8_test" --gtest_color=no --gtest_filter='CudaKv8Ops.DecodeGqa*' \
    2>&1 | tee "$OUT/kv8q_ops_wide.log" | grep -E "kv8 ops|FAILED|Failure|PASSED" | tail -12
  stamp "decode attention alone, 32 x 4,096: fp8 / int8, narrow (default) then wide"
  for form in narrow wide; do
    STRATA_CUDA_GQA_KV8=$form STRATA_OP_BENCH=decode_attention STRATA_OP_BENCH_KV_DTYPES=fp8,int8 \
      STRATA_OP_BENCH_DECODE_CONTEXT=4096 timeout 60 "$BUILD/bin/cuda_op_bench" 2>&1 | grep '"gqa".*"batch":32' | \
      sed "s/\"kernel\":\"gqa\"/\"kernel\":\"gqa-$form\"/" | tee -a "$OUT/kv8q_attention.jsonl"
  done
  stamp "decode step op by op, 32 x 4,096 (run 1: bf16 10.98 ms, fp8 11.34, int8 15.27)"
  for kv in fp8-wide int8 int8-wide; do
    local env=""
    [ "${kv#*-}" = wide ] && env="STRATA_CUDA_GQA_KV8=wide"
    env $env timeout 60 "$BUILD/bin/decode_step_bench" --plugin "$BUILD/bin/libstrata-backend-cuda.so" \
      --options activations=bf16 --shape llama3-8b --format bf16 --act bf16 --kv-dtype ${kv%-wide} --mode decode \
      --batch 32 --context 4096 --reps 10 | sed "s/\"kv_dtype\":\"[a-z0-9]*\"/\"kv_dtype\":\"$kv\"/" | \
      tee -a "$OUT/kv8q_step.jsonl"
  done
  stamp "stories260K perplexity, fp8 and f32 KV on CUDA with F32 activations (run 1, bf16 activations: fp8 7.1187, cpu 7.0171)"
  local model="$ROOT/.gpu/shared/models/stories260K/stories260K.gguf" text="$ROOT/.gpu/shared/text/tinystories_sample.txt"
  for kv in fp8 f32; do
    STRATA_CUDA_ACTIVATIONS=f32 timeout 60 "$BUILD/bin/strata" perplexity -m "$model" -f "$text" --ctx 128 --json \
      --device cuda --kv-dtype $kv 2>/dev/null | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(sys.argv[1], "ppl", r["ppl"])' "$kv" | \
      tee -a "$OUT/kv8q_ppl.txt"
  done
}

# Issue 28 item 6, the tensor-core decode kernel's split-K form (flash-decoding: a (token, KV
# head)'s keys split across warps, kernels/cuda/decode_attention_mma.cu), about 120 s, all in
# $OUT/cuda-attn_*: the decode tests (every kernel path, split and unsplit, BF16 / FP8 / I8
# vs float64; conformance Attention with decode_attention=mma; the direct 8-bit form), the
# attention kernels alone (gqa = the previous default at 32 x 4,096, mma = split-K;
# STRATA_CUDA_DECODE_MMA_SPLITS=1 is the tensor-core kernel without split-K), TPOT p50 of 32 x
# 4,096 with BF16 and FP8 KV on the default path, twice: "steady" with every prompt prefilled in
# one step (--max-batched-tokens 131072: the decode steps alone, what the issue's figure is
# about) and as phase_kv8 ran it (8,192 tokens per step: a median request decodes through ~8
# prefill steps of 8,192 tokens, which FP8 does not shorten), then the decode step alone, and
# where time is left the same with decode_attention=gqa. Opt-in forms timed beside the default:
# STRATA_CUDA_DECODE_MMA_KV8=direct (8-bit B fragments from the raw rows in registers) and
# STRATA_CUDA_DECODE_MMA_MERGE=fused (the last split merges; no combine kernel).
# KV8_SPLITK_BUDGET=N gives it N seconds instead of 120. Build: cuda_kv8_test cuda_backend_test
# cuda_decode_kernel_choice_test backend_conformance_test cuda_op_bench decode_step_bench strata
# strata-backend-cuda strata-backend-cpu.
phase_kv8_splitk() {
  local P0=$(date +%s) O="$OUT/cuda-attn2"
  left() { echo $(( ${KV8_SPLITK_BUDGET:-300} - ($(date +%s) - P0) )); }  # seconds of phase time left
  stamp "kv8_splitk: decode attention tests (tensor-core kernel split and not, BF16 P as hi + lo, 8-bit direct form; vs float64)"
  local T="${O}_tests.txt" R="${O}_test_runs.txt"
  : > "$T"; : > "$R"
  run_suite() {  # $1 label, $2 timeout s, $3 env (space-separated or -), $4 binary, $5 gtest filter
    local label=$1 lim=$2 envs=$3 bin=$4 filter=$5 rc t0=$(date +%s)
    [ "$envs" = "-" ] && envs=""
    echo "=== $label" >> "$T"
    env $envs timeout "$lim" "$BUILD/bin/$bin" --gtest_color=no --gtest_filter="$filter" > "${O}_run.tmp" 2>&1
    rc=$?
    grep -vE "^\[ RUN|^\[       OK" "${O}_run.tmp" >> "$T"
    local st="passed"
    [ $rc -eq 124 ] && st="TIMED OUT after ${lim}s (tests after the last [ OK ] did not finish)"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && st="FAILED (rc $rc)"
    grep -qE "^\[  FAILED  \]" "${O}_run.tmp" && st="FAILED"
    echo "$(printf '%-44s' "$label") $st  ($(grep -c '^\[       OK' "${O}_run.tmp") ok, $(grep -cE '^\[  SKIPPED \] .* ms\)$' "${O}_run.tmp") skipped, $(( $(date +%s) - t0 )) s)" | tee -a "$R"
  }
  local TC='CudaKv8Ops.DecodeMma*:CudaKv8Ops.DecodeSplitK*:CudaKv8Ops.DecodeTensorCore*'
  run_suite "decode kernel choice (host rules)" 10 - cuda_decode_kernel_choice_test '*'
  run_suite "kv8 tensor-core decode, default forms" 150 - cuda_kv8_test "$TC"
  run_suite "CudaMmaDecode (vs CPU, bad block table)" 40 - cuda_backend_test 'CudaMmaDecode.*'
  run_suite "kv8 split-K, convert form + fused merge" 60 "STRATA_CUDA_DECODE_MMA_KV8=convert STRATA_CUDA_DECODE_MMA_MERGE=fused" \
    cuda_kv8_test 'CudaKv8Ops.DecodeSplitKTensorCoreKernel'
  if grep -qvE " passed  \(" "$R"; then echo "cuda-attn2 TESTS: NOT ALL PASSED (see above; failures:)"; grep -E "^\[  FAILED|Failure|outside" "$T" | head -12
  else echo "cuda-attn2 TESTS: all $(wc -l < "$R") runs passed"; fi
  grep -E "^\[ kv8 ops  \] BF16" "$T" | head -20

  stamp "kv8_splitk: decode attention alone, gqa vs mma, bf16 / fp8 / int8 ($(left) s left)"
  : > "${O}_attention.jsonl"
  ab() {  # $1 label, $2 cache types, $3 context, then env assignments
    local label=$1 types=$2 ctx=$3
    shift 3
    env "$@" STRATA_OP_BENCH=decode_attention STRATA_OP_BENCH_KV_DTYPES=$types STRATA_OP_BENCH_DECODE_CONTEXT=$ctx \
      timeout 20 "$BUILD/bin/cuda_op_bench" 2>&1 | grep '^{"op":"decode_attention"' | \
      sed "s/\"kernel\":\"mma\"/\"kernel\":\"mma-$label\"/; s/\"kernel\":\"gqa\"/\"kernel\":\"gqa-$label\"/" >> "${O}_attention.jsonl"
  }
  ab sweep bf16,fp8,int8 ""  # every shape of the sweep
  ab single-p bf16 4096 STRATA_CUDA_DECODE_MMA_BF16_P=single
  ab rescale-always bf16,fp8 4096 STRATA_CUDA_DECODE_MMA_RESCALE=always
  ab convert fp8 4096 STRATA_CUDA_DECODE_MMA_KV8=convert
  ab splits64 bf16,fp8 256 STRATA_CUDA_DECODE_MMA_SPLITS=64
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
  r = json.loads(l)
  if r["kernel"].startswith("gqa-") and r["kernel"] != "gqa-sweep": continue
  print("%-20s %-5s b%-4d ctx%-5d h%d/%d %-9s attn %7.1f us  rope_attn %7.1f us  %5.0f GB/s" % (r["kernel"], r["kv_dtype"], r["batch"], r["context"], r["heads"], r["kv_heads"], r["block_tables"], r["attention_us"], r["rope_attention_us"], r["kv_GBps"]))' \
    "${O}_attention.jsonl" > "${O}_attention.txt"
  grep -E "b32  ctx4096|b1   ctx256" "${O}_attention.txt" | grep -E "sweep|single|rescale|convert|splits64"
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["kv_dtype"], r["batch"], r["context"], r["heads"], r["kv_heads"], r["block_tables"])
g = {key(r): r for r in rows if r["kernel"] == "gqa-sweep"}
for r in rows:
  if r["kernel"] != "mma-sweep" or key(r) not in g: continue
  q = g[key(r)]
  print("sweep %-5s b%-4d ctx%-5d h%d/%d %-9s gqa %7.1f  mma %7.1f us (rope_attn gqa %7.1f  mma %7.1f)  mma/gqa %.2f" % (key(r) + (q["attention_us"], r["attention_us"], q["rope_attention_us"], r["rope_attention_us"], r["rope_attention_us"] / q["rope_attention_us"])))' \
    "${O}_attention.jsonl" | tee "${O}_sweep.txt"

  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local M="$S --num-requests 32 --prompt-len-min 4096 --prompt-len-max 4096 --output-len-min 128 --output-len-max 128"
  M="$M --max-num-seqs 32 --max-batched-tokens 131072 --kv-blocks 9000"  # steady: all 32 prompts in one prefill step
  : > "${O}_tpot.jsonl"
  tpot() {  # $1 label, $2 kv dtype, then env assignments
    local label=$1 kv=$2
    shift 2
    [ "$(left)" -gt 40 ] || { echo "tpot $label: skipped (phase time)"; return; }
    env "$@" timeout 75 $M --kv-dtype $kv 2>"${O}_tpot_$label.err" | \
      python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["label"]=sys.argv[1]; print(json.dumps(r))' "$label" 2>/dev/null \
      >> "${O}_tpot.jsonl" || tail -3 "${O}_tpot_$label.err"
  }
  stamp "kv8_splitk: steady TPOT p50, 32 x 4,096 prompts, 128 out, BF16 vs FP8 KV, default path ($(left) s left)"
  tpot steady-bf16 auto
  tpot steady-fp8 fp8
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
p50 = {r["label"]: r["tpot_ms"]["p50"] for r in rows}
for r in rows:
  t = r["tpot_ms"]["p50"]; b = p50.get("steady-bf16")
  print("%-18s TPOT p50 %6.2f ms (%s of bf16)  p90 %6.2f  forward %.2f ms/step  steps %d  output tok/s %.0f" % (r["label"], t,
        "%.3f" % (t / b) if b else "-", r["tpot_ms"]["p90"], r["forward_ms_per_step"], r["steps"], r["output_tokens_per_s"]))' \
    "${O}_tpot.jsonl" | tee "${O}_tpot.txt"

  stamp "kv8_splitk: batch-1 decode 128/128 bf16, decode_attention auto (now the tensor-core kernel at batch 1) vs gqa ($(left) s left)"
  : > "${O}_batch1.txt"
  local da
  for da in ${KV8_BATCH1_KERNELS:-auto gqa}; do
    [ "$(left)" -gt 30 ] || { echo "batch-1 $da: skipped (phase time)" | tee -a "${O}_batch1.txt"; continue; }
    STRATA_CUDA_DECODE_ATTENTION=$da timeout 60 $S --prompt-tokens 128 --gen-tokens 128 -r 3 2>"${O}_batch1_$da.err" \
      > "${O}_batch1_$da.json"
    [ -s "${O}_batch1_$da.json" ] || { tail -3 "${O}_batch1_$da.err"; continue; }
    python3 -c 'import json,sys
t = open(sys.argv[2]).read(); i = t.find("{"); r = json.loads(t[i:]) if i >= 0 else {}
print("batch-1 decode_attention=%-4s decode %s tok/s  prefill %s tok/s  graph replays %s %s" % (sys.argv[1],
      r.get("decode_tokens_per_s"), r.get("prefill_tokens_per_s"), r.get("decode_graph_replays"), r.get("decode_graph_failure", "")))' \
      "$da" "${O}_batch1_$da.json" | tee -a "${O}_batch1.txt"
  done
  rm -f "${O}_run.tmp"
  stamp "kv8_splitk: done ($(left) s left)"
}

# FP8 decode attention forms (helper cuda-attn3). Targets: strata strata-backend-cuda
# cuda_kv8_test cuda_op_bench. One output file, $OUT/attn3.txt.
phase_attn3() {
  local P0=$(date +%s) F="$OUT/attn3.txt" W=/tmp/strata-attn3 f envs
  left() { echo $(( ${ATTN3_BUDGET:-100} - ($(date +%s) - P0) )); }
  say() { echo "$*" | tee -a "$F"; }
  rm -rf "$W"; mkdir -p "$W"; : > "$F"
  say "=== attn3 ($(date -u +%H:%M:%S) UTC, commit $(git rev-parse --short HEAD 2>/dev/null)): decode attention alone, mma kernel, 32 x 4,096 (us; median of the op bench's calls)"
  # The default form first and last (drift), each opt-in form between.
  local forms="default ${ATTN3_FORMS:-direct lean lite} default"
  for f in $forms; do
    [ "$(left)" -gt 60 ] || { say "attention $f: skipped (phase time)"; continue; }
    envs="STRATA_OP_BENCH=decode_attention STRATA_OP_BENCH_DECODE_CONTEXT=4096 STRATA_OP_BENCH_DECODE_KERNELS=mma"
    [ "$f" = default ] && envs="$envs STRATA_OP_BENCH_KV_DTYPES=bf16,fp8" || envs="$envs STRATA_OP_BENCH_KV_DTYPES=fp8 STRATA_CUDA_DECODE_MMA_KV8=$f"
    env $envs timeout 20 "$BUILD/bin/cuda_op_bench" 2>"$W/bench_$f.err" | grep '^{"op":"decode_attention"' | \
      sed "s/\"kernel\":\"mma\"/\"kernel\":\"$f\"/" >> "$W/attn.jsonl" || tail -2 "$W/bench_$f.err" | tee -a "$F"
  done
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
  print("%-10s %-5s b%-3d ctx%d  attn %6.1f us  rope_attn %6.1f us  %5.0f GB/s" % (r["kernel"], r["kv_dtype"], r["batch"], r["context"], r["attention_us"], r["rope_attention_us"], r["kv_GBps"]))
new = sorted([r for r in rows if r["kv_dtype"] == "fp8" and r["batch"] == 32 and r["kernel"] != "default"], key=lambda r: r["rope_attention_us"])
best = new[0] if new else None
if best: open(sys.argv[2], "w").write(" ".join(r["kernel"] for r in new[:3]))
d = [r["rope_attention_us"] for r in rows if r["kv_dtype"] == "fp8" and r["batch"] == 32 and r["kernel"] == "default"]
if best and d: print("fastest opt-in form at 32 x 4,096 (rope_attn): %s %.1f us, default %s us: %.3fx" % (best["kernel"], best["rope_attention_us"], " / ".join("%.1f" % x for x in d), best["rope_attention_us"] / min(d)))' \
    "$W/attn.jsonl" "$W/best" 2>&1 | tee -a "$F"
  # The three fastest forms' FP8 decode tests, at once (separate processes; small kernels,
  # host-side float64 references), then TPOT with the fastest whose tests passed.
  local top=${ATTN3_TEST_FORM:-$(cat "$W/best" 2>/dev/null)} best="" t pids=""
  top=${top:-lite}
  say "=== FP8 decode tests with each of: $top forced (FP8 caches only; vs float64; in parallel) ($(left) s left)"
  local TC='CudaKv8Ops.DecodeSplitKTensorCoreKernel*:CudaKv8Ops.DecodeTensorCoreKernelGqaRatios:CudaKv8Ops.DecodeMmaKernel*'
  local lim=$(( $(left) - 42 )); [ $lim -gt 50 ] && lim=50; [ $lim -lt 15 ] && lim=15
  for t in $top; do
    ( STRATA_CUDA_DECODE_MMA_KV8=$t STRATA_KV8_TEST_CACHES=FP8 timeout -k 5 $lim "$BUILD/bin/cuda_kv8_test" --gtest_color=no \
        --gtest_filter="$TC" > "$W/tests_$t.txt" 2>&1; echo $? > "$W/tests_$t.rc" ) &
    pids="${pids:-} $!"
  done
  wait $pids  # the test processes only (a bare wait can also wait on the log's tee)
  for t in $top; do
    local rc=$(cat "$W/tests_$t.rc") st=passed
    [ "$rc" -eq 124 ] && st="TIMED OUT after ${lim}s"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && st="FAILED (rc $rc)"
    grep -qE "^\[  FAILED  \]" "$W/tests_$t.txt" && st=FAILED
    [ "$st" = passed ] && [ -z "$best" ] && best=$t
    say "attn3 TESTS ($t): $st  ($(grep -c '^\[       OK' "$W/tests_$t.txt") ok, $(grep -cE '^\[  SKIPPED \] .* ms\)$' "$W/tests_$t.txt") skipped, $(grep -c '^\[ kv8 ops  \] FP8' "$W/tests_$t.txt") FP8 cases printed)"
  done
  for t in $top; do
    say "--- $t"
    grep -E "^\[       OK|^\[  FAILED|^\[  SKIPPED|Failure|outside|kv8 ops  \] FP8" "$W/tests_$t.txt" | head -45 | tee -a "$F"
  done
  best=${best:-${top%% *}}
  say "TPOT form: $best (the fastest of those whose tests passed; else the fastest)"

  say "=== steady TPOT p50, 32 x 4,096 prompts, 128 out, Llama-3-8B shape bf16 weights ($(left) s left)"
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local M="$S --num-requests 32 --prompt-len-min 4096 --prompt-len-max 4096 --output-len-min 128 --output-len-max 128"
  M="$M --max-num-seqs 32 --max-batched-tokens 131072 --kv-blocks 9000"
  tpot() {  # $1 label, $2 kv dtype, then env assignments
    local label=$1 kv=$2
    shift 2
    [ "$(left)" -gt 18 ] || { say "tpot $label: skipped (phase time)"; return; }
    env "$@" timeout 40 $M --kv-dtype $kv 2>"$W/tpot_$label.err" | \
      python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["label"]=sys.argv[1]; print(json.dumps(r))' "$label" 2>/dev/null \
      >> "$W/tpot.jsonl" || tail -3 "$W/tpot_$label.err" | tee -a "$F"
  }
  tpot bf16 auto
  tpot "fp8-$best" fp8 STRATA_CUDA_DECODE_MMA_KV8=$best
  tpot fp8-default fp8
  [ "$(left)" -gt 40 ] && tpot "fp8-$best-2" fp8 STRATA_CUDA_DECODE_MMA_KV8=$best
  [ "$(left)" -gt 20 ] && tpot bf16-2 auto
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [r["tpot_ms"]["p50"] for r in rows if r["label"].startswith("bf16")]
for r in rows:
  t = r["tpot_ms"]["p50"]
  print("%-20s TPOT p50 %6.2f ms (%s of bf16)  p90 %6.2f  forward %.2f ms/step  steps %d  output tok/s %.0f" % (r["label"], t,
        "%.3f" % (t / b[0]) if b else "-", r["tpot_ms"]["p90"], r["forward_ms_per_step"], r["steps"], r["output_tokens_per_s"]))' \
    "$W/tpot.jsonl" 2>&1 | tee -a "$F"
  say "=== attn3 done ($(left) s left)"
}

# attn3's winner as the default, verified (helper cuda-attn3; the session's last call gives it
# ~60 s). Targets: strata strata-backend-cuda cuda_kv8_test cuda_decode_kernel_choice_test.
# One output file, $OUT/attn3_final.txt.
phase_attn3_final() {
  local P0=$(date +%s) F="$OUT/attn3_final.txt" W=/tmp/strata-attn3-final t
  left() { echo $(( ${ATTN3_BUDGET:-60} - ($(date +%s) - P0) )); }
  say() { echo "$*" | tee -a "$F"; }
  rm -rf "$W"; mkdir -p "$W"; : > "$F"
  say "=== attn3_final ($(date -u +%H:%M:%S) UTC, commit $(git rev-parse --short HEAD 2>/dev/null)): FP8 decode tests on the DEFAULT path (lean + lite; no STRATA_CUDA_DECODE_MMA_KV8), vs float64"
  [ -n "${STRATA_CUDA_DECODE_MMA_KV8:-}" ] && say "WARNING: STRATA_CUDA_DECODE_MMA_KV8=$STRATA_CUDA_DECODE_MMA_KV8 is set; unset for this phase"
  timeout 10 env -u STRATA_CUDA_DECODE_MMA_KV8 "$BUILD/bin/cuda_decode_kernel_choice_test" --gtest_color=no 2>&1 | \
    grep -E "PASSED|FAILED|Failure" | head -5 | sed 's/^/host choice rules: /' | tee -a "$F"
  # The FP8 cases of the decode tests, three processes at once (each test is independent;
  # one process took ~30 s in call 2): the split-K test, its fused form, the rest.
  local parts="CudaKv8Ops.DecodeSplitKTensorCoreKernel CudaKv8Ops.DecodeSplitKTensorCoreKernelFusedRopeAttention"
  parts="$parts CudaKv8Ops.DecodeTensorCoreKernelGqaRatios:CudaKv8Ops.DecodeMmaKernel*"
  local n=0 pids=""
  for t in $parts; do
    n=$((n + 1))
    ( env -u STRATA_CUDA_DECODE_MMA_KV8 STRATA_KV8_TEST_CACHES=FP8 timeout -k 5 25 "$BUILD/bin/cuda_kv8_test" --gtest_color=no \
        --gtest_filter="$t" > "$W/tests_$n.txt" 2>&1; echo $? > "$W/tests_$n.rc" ) &
    pids="$pids $!"
  done
  wait $pids  # the test processes only (a bare wait can also wait on the log's tee)
  local all=passed ok=0 cases=0
  n=0
  for t in $parts; do
    n=$((n + 1))
    local rc=$(cat "$W/tests_$n.rc") st=passed
    [ "$rc" -eq 124 ] && st="TIMED OUT after 25s"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && st="FAILED (rc $rc)"
    grep -qE "^\[  FAILED  \]" "$W/tests_$n.txt" && st=FAILED
    [ "$st" = passed ] || all="NOT ALL PASSED"
    say "  $t: $st ($(grep -c '^\[       OK' "$W/tests_$n.txt") ok, $(grep -cE '^\[  SKIPPED \] .* ms\)$' "$W/tests_$n.txt") skipped)"
  done
  say "attn3_final TESTS (default path, FP8): $all"
  cat "$W"/tests_*.txt | grep -E "^\[       OK|^\[  FAILED|^\[  SKIPPED|Failure|outside|kv8 ops  \] FP8" | head -40 | tee -a "$F"

  say "=== steady TPOT p50, 32 x 4,096 prompts, 128 out, Llama-3-8B shape bf16 weights: BF16 KV, FP8 KV (default) ($(left) s left)"
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local M="$S --num-requests 32 --prompt-len-min 4096 --prompt-len-max 4096 --output-len-min 128 --output-len-max 128"
  M="$M --max-num-seqs 32 --max-batched-tokens 131072 --kv-blocks 9000"
  for t in bf16:auto fp8:fp8; do
    env -u STRATA_CUDA_DECODE_MMA_KV8 timeout 35 $M --kv-dtype ${t#*:} 2>"$W/tpot_${t%%:*}.err" | \
      python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["label"]=sys.argv[1]; print(json.dumps(r))' "${t%%:*}" 2>/dev/null \
      >> "$W/tpot.jsonl" || tail -3 "$W/tpot_${t%%:*}.err" | tee -a "$F"
  done
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [r["tpot_ms"]["p50"] for r in rows if r["label"] == "bf16"]
for r in rows:
  t = r["tpot_ms"]["p50"]
  print("%-5s KV  TPOT p50 %6.2f ms (%s of bf16)  p90 %6.2f  forward %.2f ms/step  steps %d  output tok/s %.0f" % (r["label"], t,
        "%.3f" % (t / b[0]) if b else "-", r["tpot_ms"]["p90"], r["forward_ms_per_step"], r["steps"], r["output_tokens_per_s"]))' \
    "$W/tpot.jsonl" 2>&1 | tee -a "$F"
  say "=== attn3_final done ($(left) s left of ${ATTN3_BUDGET:-60})"
}

# Issue 28's GPU quality checks: stories260K quantized by `strata quantize` with calibration on
# the CPU and on CUDA (the files compared), then `strata perplexity` of each file on CUDA (bf16
# and F32 activations) beside the CPU backend (quantppl.jsonl). Needs .gpu/shared/text/
# tinystories_sample.txt and calib_wikitext.txt (the first 40 KB of WikiText-2's test text).
phase_quantppl() {
  local S="$ROOT/.gpu/shared/models/stories260K" text="$ROOT/.gpu/shared/text/tinystories_sample.txt"
  local calib="$ROOT/.gpu/shared/text/calib_wikitext.txt" Q=/tmp/strata-quantppl m dev
  if [ ! -f "$text" ] || [ ! -f "$calib" ]; then
    stamp "no $text or $calib: quantppl skipped"; return
  fi
  rm -rf "$Q"; mkdir -p "$Q"; : > "$OUT/quantppl.jsonl"
  # The files stories260K can be written as (llm-int8 has no file layout; GPTQ's HF layout needs
  # widths that are multiples of 8, so GPTQ goes to GGUF Q4_0 groups); calibration only where
  # the method takes it, and there on both devices.
  local -A FLAGS=([int8]="--method int8" [w8a8]="--method w8a8 CAL" [fp8]="--method fp8"
    [q8_0]="--method rtn --bits 8" [q4_0]="--method rtn --group-size 32 --sym" [gptq-g32]="--method gptq --group-size 32 --sym CAL")
  for m in int8 w8a8 fp8 q8_0 q4_0 gptq-g32; do
    local ext="" f="${FLAGS[$m]}"; [[ $m == q* || $m == gptq* ]] && ext=.gguf
    f="${f/CAL/--calib $calib --calib-tokens 4096 --calib-ctx 128}"
    # cuda-f32: the calibration forward passes with F32 activations (CUDA's default is BF16,
    # which moves the recorded activation maxima / Hessians and so the calibrated files).
    for dev in cpu cuda cuda-f32; do
      [ $dev = cuda-f32 ] && [[ $f != *--calib* ]] && continue
      local cenv=""; [ $dev = cuda-f32 ] && cenv="STRATA_CUDA_ACTIVATIONS=f32"
      env $cenv timeout 120 "$BUILD/bin/strata" quantize -m "$S/stories260K.gguf" -o "$Q/$m-$dev$ext" $f \
        --device ${dev%-f32} --json > "$Q/$m-$dev.log" 2>&1 || \
        { stamp "quantize $m on $dev failed"; tail -3 "$Q/$m-$dev.log"; }
    done
    for dev in cuda cuda-f32; do
      [ -e "$Q/$m-$dev$ext" ] || continue
      if diff -rq "$Q/$m-cpu$ext" "$Q/$m-$dev$ext" >/dev/null 2>&1; then stamp "$m: CPU- and $dev-made files identical"
      else stamp "$m: CPU- and $dev-made files differ"; python3 scripts/gpu/compare_quantized.py "$Q/$m-cpu$ext" "$Q/$m-$dev$ext" 2>&1 | tail -4; fi
    done
    for dev in cuda cuda-f32 cpu; do
      local env=""; [ $dev = cuda-f32 ] && env="STRATA_CUDA_ACTIVATIONS=f32"
      env $env timeout 60 "$BUILD/bin/strata" perplexity -m "$Q/$m-cpu$ext" --tokenizer "$S/tok512.bin" -f "$text" --ctx 128 --json --device ${dev%-f32} \
        2>"$Q/$m-ppl-$dev.err" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["method"]=sys.argv[1]; r["device"]=sys.argv[2]; print(json.dumps(r))' "$m" "$dev" \
        >> "$OUT/quantppl.jsonl" || { stamp "perplexity $m on $dev failed"; tail -3 "$Q/$m-ppl-$dev.err"; }
    done
  done
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ppl = {(r["method"], r["device"]): r["ppl"] for r in rows}
for m in dict.fromkeys(r["method"] for r in rows):
  c, f, p = ppl.get((m, "cuda")), ppl.get((m, "cuda-f32")), ppl.get((m, "cpu"))
  d = lambda a: "%+.3f%%" % (100 * (a / p - 1)) if a and p else "-"
  print("%-9s ppl cpu %s  cuda(bf16 act) %s %s  cuda(f32 act) %s %s" % (m, p, c, d(c), f, d(f)))' "$OUT/quantppl.jsonl"
}

# Issue 28's serving figure: 256 concurrent requests through `strata serve`, bf16 and FP8
# weights with an FP8 KV cache, in the same run (http_load_bf16.json, http_load_fp8.json).
# Why the streaming GEMV's step is slower end to end than the mma GEMV's although its products
# are faster (issue 28, run 7): W4A16 batch-1 decode with each kernel, graph-replayed (the
# figure) and eager with the per-op GPU profile (where the time goes), gemv_diag_*.
phase_gemv_diag() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --synthetic-dtype ${STRATA_DIAG_DTYPE:-int4-g128} --device cuda --json --prompt-tokens 128 --gen-tokens 64 -r 1"
  local k
  for k in ${STRATA_DIAG_KERNELS:-mma stream}; do
    stamp "W4A16 batch-1 decode, $k GEMV, graphs"
    STRATA_CUDA_QGEMV_KERNEL=$k timeout 70 $S > "$OUT/gemv_diag_${k}_graphs.json" 2> "$OUT/gemv_diag_${k}_graphs.txt"
    tail -2 "$OUT/gemv_diag_${k}_graphs.txt"; head -c 600 "$OUT/gemv_diag_${k}_graphs.json"; echo
    stamp "W4A16 batch-1 decode, $k GEMV, eager, op profile"
    STRATA_CUDA_QGEMV_KERNEL=$k STRATA_CUDA_PROFILE=1 timeout 70 $S --enforce-eager \
      > "$OUT/gemv_diag_${k}_eager.json" 2> "$OUT/gemv_diag_${k}_eager.txt"
    sed -n '/strata cuda op profile/,$p' "$OUT/gemv_diag_${k}_eager.txt" | head -45
  done
}

# The lead's baseline diagnostics for the helpers of 2026-12-03 (about 4 minutes, everything in
# $OUT/diag1_*): the mma W4A16 GEMV's batch-1 step op by op (the stream one's is in
# docs/benchmarks.md), the W8A8 4,096-token prefill op by op with each GEMM choice, and the decode
# step of 32 sequences x 4,096 tokens op by op with BF16 and FP8 KV caches.
phase_lead_diag1() {
  STRATA_DIAG_KERNELS=mma phase_gemv_diag
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json" g kv
  for g in auto wgmma; do
    stamp "W8A8 4,096-token prefill, quant_gemm=$g, eager, op profile"
    STRATA_CUDA_QUANT_GEMM=$g STRATA_CUDA_PROFILE=1 timeout 60 $S --synthetic-dtype w8a8 --prompt-tokens 4096 \
      --gen-tokens 2 --batch-tokens 4096 -r 1 --enforce-eager > "$OUT/diag1_prefill_$g.json" 2> "$OUT/diag1_prefill_$g.txt"
    sed -n '/strata cuda op profile/,$p' "$OUT/diag1_prefill_$g.txt" | head -30
  done
  for kv in bf16 fp8; do
    stamp "decode step op by op, 32 x 4,096, $kv KV"
    STRATA_CUDA_PROFILE=1 timeout 60 "$BUILD/bin/decode_step_bench" --plugin "$BUILD/bin/libstrata-backend-cuda.so" \
      --options activations=bf16 --shape llama3-8b --format bf16 --act bf16 --kv-dtype $kv --mode decode \
      --batch 32 --context 4096 --reps 5 > "$OUT/diag1_step_$kv.jsonl" 2> "$OUT/diag1_step_$kv.txt"
    cat "$OUT/diag1_step_$kv.jsonl"; sed -n '/strata cuda op profile/,$p' "$OUT/diag1_step_$kv.txt" | head -25
  done
  stamp "decode attention alone, 1 and 32 x 4,096, bf16 / fp8"
  STRATA_OP_BENCH=decode_attention STRATA_OP_BENCH_KV_DTYPES=bf16,fp8 STRATA_OP_BENCH_DECODE_CONTEXT=4096 \
    timeout 60 "$BUILD/bin/cuda_op_bench" > "$OUT/diag1_attention.jsonl" 2>&1; tail -12 "$OUT/diag1_attention.jsonl"
}

# gemv3_step LIMIT OUTFILE CMD...: one step of phase_gemv3 / phase_gemv3_final under timeout,
# skipped when past the phase's budget (the caller's locals t_start, budget and summary file F).
gemv3_step() {
  local limit=$1 out=$2
  shift 2
  if (( SECONDS - t_start + limit > budget + 30 )); then stamp "skipped $out: the phase's ${budget}s" | tee -a "$F"; return; fi
  stamp "$out (limit ${limit}s)" | tee -a "$F"
  timeout "$limit" "$@" > "$OUT/$out" 2>&1
  echo "rc=$? after $(( SECONDS - t_start ))s" | tee -a "$F"
}

# gemv3 (issue 28 items 1-2, helper cuda-gemv): why the streaming GEMV was faster in the sweep
# than in the model, and the fix. Everything in $OUT/cuda-gemv_*.txt / .jsonl; each step is
# skipped (said so) when it could take the phase past ${STRATA_GEMV3_BUDGET:-120} s:
#   1. the streaming / tiled GEMV tests (float64 reference; every configuration, fused prologues)
#   2. the quick sweep at one token for W4A16 *with zero points* (--zeros 1: what
#      --synthetic-dtype int4-g128 makes, asymmetric RTN; run 7's sweep measured symmetric weights)
#   3. W4A16 batch-1 decode 128/128 with the streaming GEMV (graphs)
#   4. the quick sweep at one token for W8A16; W8A16 batch-1 decode with the streaming GEMV
#   5. one eager W4A16 step's op profile (STRATA_CUDA_PROFILE=1) with the streaming GEMV
#   6. the W4A16 sweep without zero points (run 7's case) and at 8 tokens
#   7. Nsight Compute (ncu) on one layer's four products in the model and gate_up in the sweep
phase_gemv3() {
  local S0="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local S="$S0 --prompt-tokens 128 --gen-tokens 128"
  local F="$OUT/cuda-gemv_gemv3.txt" t_start=$SECONDS budget=${STRATA_GEMV3_BUDGET:-120}
  local K=${STRATA_GEMV3_KERNEL:-stream}
  gemv3_step 60 cuda-gemv_test.txt "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter="${STRATA_GEMV3_TESTS:-CudaQuant.Stream*:CudaQuant.Tiled*:CudaQuant.MatmulEx*}"
  grep -E "^\[  PASSED|^\[  FAILED|Failure|elements off|Which is" "$OUT/cuda-gemv_test.txt" | head -20 | tee -a "$F"
  gemv3_step 30 cuda-gemv_sweep_w4z1.jsonl "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1 --formats w4a16 --zeros 1 --quick 1
  grep -E 'qgemv_sweep_best|"variant":"(mma|default|read|unfused|xsum)"|error' "$OUT/cuda-gemv_sweep_w4z1.jsonl" | tee -a "$F"
  gemv3_step 60 cuda-gemv_decode_int4.json env STRATA_CUDA_QGEMV_KERNEL=$K $S --synthetic-dtype int4-g128 -r 1
  grep -h decode_tokens "$OUT/cuda-gemv_decode_int4.json" | head -c 400 | tee -a "$F"; echo | tee -a "$F"
  gemv3_step 25 cuda-gemv_sweep_w8.jsonl "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1 --formats w8a16 --quick 1
  grep -E 'qgemv_sweep_best|"variant":"(mma|default|read)"|error' "$OUT/cuda-gemv_sweep_w8.jsonl" | tee -a "$F"
  gemv3_step 60 cuda-gemv_decode_int8.json env STRATA_CUDA_QGEMV_KERNEL=$K $S --synthetic-dtype int8 -r 1
  grep -h decode_tokens "$OUT/cuda-gemv_decode_int8.json" | head -c 400 | tee -a "$F"; echo | tee -a "$F"
  gemv3_step 60 cuda-gemv_profile_int4.txt env STRATA_CUDA_QGEMV_KERNEL=$K STRATA_CUDA_PROFILE=1 \
    $S0 --synthetic-dtype int4-g128 -r 1 --prompt-tokens 128 --gen-tokens 32 --enforce-eager
  sed -n '/strata cuda op profile/,$p' "$OUT/cuda-gemv_profile_int4.txt" | head -40 | tee -a "$F"
  gemv3_step 30 cuda-gemv_sweep_w4z0.jsonl "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1,8 --formats w4a16 --zeros 0 --quick 1
  grep -E 'qgemv_sweep_best|error' "$OUT/cuda-gemv_sweep_w4z0.jsonl" | tee -a "$F"
  # Last (op_profiler.h: ncu has captured nothing on the lent H200s before; if it does now):
  # Nsight Compute on one layer's four products in the model (eager decode; the prefill's
  # 16-token products take the dequantize + GEMM path) and on gate_up alone in the sweep.
  local NCU=/usr/local/cuda/bin/ncu SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
  if [ -x "$NCU" ]; then
    gemv3_step 90 cuda-gemv_ncu_model.txt env STRATA_CUDA_QGEMV_KERNEL=$K $NCU $SEC --kernel-name regex:QuantGemvStreamKernel \
      --launch-skip 132 --launch-count 4 $S0 --synthetic-dtype int4-g128 -r 1 --prompt-tokens 16 --gen-tokens 4 --enforce-eager
    grep -E "QuantGemvStreamKernel|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Dynamic Shared|Grid Size|Block Size|Issued Warp|No Eligible|Warp Cycles Per Issued|==ERROR|==WARNING" \
      "$OUT/cuda-gemv_ncu_model.txt" | head -80 | tee -a "$F"
    gemv3_step 40 cuda-gemv_ncu_sweep.txt $NCU $SEC --kernel-name regex:QuantGemvStreamKernel --launch-count 1 \
      "$BUILD/bin/qgemv_sweep" --reps 5 --tokens 1 --formats w4a16 --zeros 1 --quick 1 --shapes gate_up
    grep -E "QuantGemvStreamKernel|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Dynamic Shared|Grid Size|Block Size|Issued Warp|No Eligible|Warp Cycles Per Issued|==ERROR" \
      "$OUT/cuda-gemv_ncu_sweep.txt" | head -30 | tee -a "$F"
  fi
}

# gemv3_final (call 2 of cuda-gemv): the streaming GEMV (STRATA_CUDA_QGEMV_KERNEL=stream), its
# tests, the issue's figures (batch-1 decode 128/128 -r 3, W4A16 and W8A16), one eager W4A16
# step's op profile (kernels and non-product time per step), then the one-token sweeps and the
# A/B figures as the budget allows. Everything in $OUT/cuda-gemv_final*.
phase_gemv3_final() {
  local S0="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local S="$S0 --prompt-tokens 128 --gen-tokens 128"
  local F="$OUT/cuda-gemv_final.txt" t_start=$SECONDS budget=${STRATA_GEMV3_BUDGET:-120}
  gemv3_step 75 cuda-gemv_final_test.txt "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter="${STRATA_GEMV3_TESTS:-CudaQuant.Stream*:CudaQuant.Tiled*:CudaQuant.Int4*:CudaQuant.Int8*:CudaQuant.MatmulEx*}"
  grep -E "^\[  PASSED|^\[  FAILED|^\[==========\]|Failure|elements off|Which is" "$OUT/cuda-gemv_final_test.txt" | head -20 | tee -a "$F"
  # After the tests (which set it themselves): the streaming GEMV for the runs below, whether or
  # not the merged tree makes it the default (cuda-gemv-next does).
  export STRATA_CUDA_QGEMV_KERNEL=${STRATA_GEMV3_KERNEL:-stream}
  local d
  for d in int4-g128 int8; do
    gemv3_step 60 cuda-gemv_final_decode_$d.json $S --synthetic-dtype $d -r 3
    grep -h decode_tokens "$OUT/cuda-gemv_final_decode_$d.json" | head -c 400 | tee -a "$F"; echo | tee -a "$F"
  done
  gemv3_step 30 cuda-gemv_final_sweep_w4z1.jsonl "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1 --formats w4a16 --zeros 1 --quick 1
  grep -E 'qgemv_sweep_best|"variant":"(mma|default|read|xsum)"|error' "$OUT/cuda-gemv_final_sweep_w4z1.jsonl" | tee -a "$F"
  gemv3_step 50 cuda-gemv_final_profile_int4.txt env STRATA_CUDA_PROFILE=1 \
    $S0 --synthetic-dtype int4-g128 -r 1 --prompt-tokens 128 --gen-tokens 32 --enforce-eager
  sed -n '/strata cuda op profile/,$p' "$OUT/cuda-gemv_final_profile_int4.txt" | head -40 | tee -a "$F"
  # A/B: the previous default (tensor-core GEMV) and INT4's x-sum form, one repetition each.
  gemv3_step 45 cuda-gemv_final_decode_int4_mma.json env STRATA_CUDA_QGEMV_KERNEL=mma $S --synthetic-dtype int4-g128 -r 1
  grep -h decode_tokens "$OUT/cuda-gemv_final_decode_int4_mma.json" | head -c 400 | tee -a "$F"; echo | tee -a "$F"
  gemv3_step 45 cuda-gemv_final_decode_int4_xsum.json env STRATA_CUDA_QGEMV_XSUM=1 $S --synthetic-dtype int4-g128 -r 1
  grep -h decode_tokens "$OUT/cuda-gemv_final_decode_int4_xsum.json" | head -c 400 | tee -a "$F"; echo | tee -a "$F"
  gemv3_step 35 cuda-gemv_final_sweep_w8.jsonl "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1,8 --formats w8a16 --quick 1
  grep -E 'qgemv_sweep_best|"variant":"(mma|default|read)"|error' "$OUT/cuda-gemv_final_sweep_w8.jsonl" | tee -a "$F"
  gemv3_step 45 cuda-gemv_final_decode_int8_mma.json env STRATA_CUDA_QGEMV_KERNEL=mma $S --synthetic-dtype int8 -r 1
  grep -h decode_tokens "$OUT/cuda-gemv_final_decode_int8_mma.json" | head -c 400 | tee -a "$F"; echo | tee -a "$F"
  gemv3_step 45 cuda-gemv_final_decode_bf16.json $S --synthetic-dtype bf16 -r 1
  grep -h decode_tokens "$OUT/cuda-gemv_final_decode_bf16.json" | head -c 400 | tee -a "$F"; echo | tee -a "$F"
  unset STRATA_CUDA_QGEMV_KERNEL
}

# Issue 28, the 8-bit wgmma GEMM at 128-256 tokens (helper cuda-gemm8; GEMM8_BUDGET seconds,
# default 120; everything in $OUT/cuda-gemm8.txt): the configuration sweep (bench/cuda/
# wgmma_sweep.cu: split-K 1..8, token tiles of 128, the 256-row wide form, against a plain
# read, per product shape, W8A8 and FP8, 128 and 256 tokens), the wide form's tests against the
# float64 reference, then the step's products as the model issues them (quant_matmul_bench --ops
# layer, op profile per product) with the wide form off and on.
phase_gemm8() {
  local F="$OUT/cuda-gemm8.txt" t_start=$SECONDS budget=${GEMM8_BUDGET:-120}
  local keep='quantized|quantize activations|^\{|strata cuda op profile|total_ms|quant_matmul_bench:'
  g8() {  # g8 LIMIT CMD...: within the budget, cut at LIMIT s
    local limit=$1 left
    shift
    left=$(( budget - (SECONDS - t_start) ))
    (( left < 10 )) && { stamp "skipped (budget): $*"; return; }
    (( limit > left )) && limit=$left
    stamp "$* (limit ${limit}s)"
    timeout "$limit" "$@" 2>&1
  }
  {
    g8 45 "$BUILD/bin/wgmma_sweep" --tokens 128,256 --formats w8a8,fp8 --reps 10
    g8 40 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.EightBitGemmWide*' | \
      grep -vE "^\[ RUN|^\[       OK" | grep -vE "worst error / tolerance 0\.[0-4]" | tail -40
    for o in "wgmma_wide=off" "wgmma_wide=on"; do
      STRATA_CUDA_PROFILE=1 g8 30 "$BUILD/bin/quant_matmul_bench" --ops layer --formats w8a8,fp8 --tokens 128,256 \
        --reps 5 ${o:+--device-options "$o"} | grep -E "$keep"
    done
    stamp "gemm8: $(( SECONDS - t_start ))s"
  } > "$F" 2>&1
  tail -5 "$F"
}

# The verifying run of gemm8 (GEMM8_FINAL_BUDGET seconds, default 100; $OUT/cuda-gemm8_final.txt):
# the wide form and the new default against the float64 reference (cuda_quant_test
# EightBitGemmWide*: 96 / 128 / 200 tokens are the default's edges), then 128 sequences 128/128
# end to end: W8A8 with the new default, W8A8 with the old one (STRATA_CUDA_WGMMA_WIDE=off), FP8
# with the new default (~23 s each); then, as the budget allows, every GEMM choice
# (EightBitGemmsMatch*) and the step's products at 64 and 256 tokens per option.
phase_gemm8_final() {
  local F="$OUT/cuda-gemm8_final.txt" t_start=$SECONDS budget=${GEMM8_FINAL_BUDGET:-100} d w
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local R="--num-requests 128 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128"
  g8() {  # g8 MIN LIMIT CMD...: starts only with MIN s of the budget left, cut at LIMIT s
    local min=$1 limit=$2 left
    shift 2
    left=$(( budget - (SECONDS - t_start) ))
    (( left < min )) && { stamp "skipped (budget, ${left}s left): $*"; return; }
    (( limit > left )) && limit=$left
    stamp "$* (limit ${limit}s)"
    timeout "$limit" "$@" 2>&1
    echo "rc=$?"
  }
  {
    g8 15 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.EightBitGemmWide*' | \
      grep -E "FAILED|PASSED|Failure|error / tolerance (0\.[5-9]|[1-9])|tests ran|rc=" | tail -30
    for w in w8a8:auto w8a8:off fp8:auto; do
      STRATA_CUDA_WGMMA_WIDE=${w#*:} g8 20 27 $S --synthetic-dtype ${w%%:*} $R --max-num-seqs 128 --max-batched-tokens 8192 | \
        grep -oE '"(output_tokens_per_s|forward_ms_per_step|steps)": *[0-9.]+|rc=.*|[Ee]rror.*' | tr '\n' ' '
      echo " <- ${w%%:*} wgmma_wide=${w#*:}"
    done
    g8 15 40 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.EightBitGemmsMatch*' | \
      grep -E "FAILED|PASSED|Failure|error / tolerance (0\.[5-9]|[1-9])|tests ran|rc=" | tail -20
    for o in wgmma_wide=off wgmma_wide=on "wgmma_wide=off;wgmma_token_tile=128"; do
      g8 12 12 "$BUILD/bin/quant_matmul_bench" --ops layer --formats w8a8 --tokens 64,256 --reps 5 \
        --device-options "$o" | grep -E "^\{|rc="
    done
    stamp "gemm8_final: $(( SECONDS - t_start ))s"
  } > "$F" 2>&1
  tail -8 "$F"
}

phase_cuda_pfa() {
  local P0=$(date +%s) W=/tmp/strata-cuda-pfa B=${CUDA_PFA_BUDGET:-120} new=${CUDA_PFA_NEW:-} f t
  local FT="$OUT/cuda-pfa_tests.txt" FO="$OUT/cuda-pfa_ops.txt" FE="$OUT/cuda-pfa_e2e.txt"
  left() { echo $(( B - ($(date +%s) - P0) )); }
  rm -rf "$W"; mkdir -p "$W"; : > "$FT"; : > "$FO"; : > "$FE"
  echo "=== cuda_pfa ($(date -u +%H:%M:%S) UTC, commit $(git rev-parse --short HEAD 2>/dev/null), budget ${B}s)" | tee -a "$FT"
  # Tests: the forms test (consecutive block tables, forms 0..6) and the other prefill tests, at once.
  # Processes at once: the forms test for each group of CUDA_PFA_TEST_FORMS, the other two tests.
  local forms_t=CudaPrefillAttention.WgmmaFormsMatchCpuOnConsecutiveBlocks
  local parts="${CUDA_PFA_TEST_FORMS:-0,1,2 3,4 5 6} edges"
  local n=0
  for t in $parts; do
    n=$((n + 1))
    if [ "$t" = edges ]; then
      ( timeout 70 "$BUILD/bin/cuda_backend_test" --gtest_color=no \
          --gtest_filter="CudaPrefillAttention.WgmmaAndFa2MatchCpuAcrossTileEdges:CudaPrefillAttention.BadBlockTableIsAnError" \
          > "$W/tests_$n.txt" 2>&1; echo $? > "$W/tests_$n.rc" ) &
    else
      ( STRATA_TEST_PREFILL_FORMS=$t timeout 70 "$BUILD/bin/cuda_backend_test" --gtest_color=no --gtest_filter="$forms_t" \
          > "$W/tests_$n.txt" 2>&1; echo $? > "$W/tests_$n.rc" ) &
    fi
  done
  wait_children
  local all=passed
  n=0
  for t in $parts; do
    n=$((n + 1))
    local rc=$(cat "$W/tests_$n.rc") st=passed
    [ "$rc" -eq 124 ] && st="TIMED OUT after 70s"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && st="FAILED (rc $rc)"
    grep -qE "^\[  FAILED  \]" "$W/tests_$n.txt" && st=FAILED
    [ "$st" = passed ] || all="NOT ALL PASSED"
    [ "$t" = edges ] && t="TileEdges (forms 0, 5, 6, fa2) + BadBlockTable" || t="$forms_t (forms $t)"
    echo "  $t: $st ($(grep -c '^\[       OK' "$W/tests_$n.txt") ok, $(grep -cE '^\[  SKIPPED \] .* ms\)$' "$W/tests_$n.txt") skipped)" | tee -a "$FT"
  done
  echo "cuda_pfa TESTS: $all ($(( $(date +%s) - P0 )) s)" | tee -a "$FT"
  cat "$W"/tests_*.txt | grep -E "^\[       OK|^\[  FAILED|^\[  SKIPPED|Failure|max err|tolerance|Expected|Which is" | head -60 >> "$FT"

  # The kernel alone per form (cuda_op_bench's attention cases on the default path; tables in order).
  echo "=== prefill attention alone per form (cuda_op_bench, median of 20 x 10 calls) ($(left) s left)" | tee -a "$FO"
  # prefill_attention=wgmma, so that the head_dim-64 cases (x64) run this kernel too (auto gives
  # them FA2 below 2,048 positions); "fa2" times FA2 on the same cases.
  for f in ${CUDA_PFA_FORMS:-0 1 5 6}; do
    [ "$(left)" -lt 20 ] && { echo "skipped form $f: $(left) s left" | tee -a "$FO"; continue; }
    local kern=wgmma
    [ "$f" = fa2 ] && kern=fa2
    STRATA_CUDA_PREFILL_ATTENTION=$kern STRATA_CUDA_PREFILL_WGMMA_FORM=$f STRATA_OP_BENCH=attention \
      STRATA_OP_BENCH_ATTENTION_CASES="1x4096x4096,1x4096x512,8x1024x1024,64x128x128,1x4096x4096x64,8x1024x1024x64,64x128x128x64" \
      timeout 40 "$BUILD/bin/cuda_op_bench" > "$W/ops_$f.txt" 2>&1
    local rc=$?
    grep -E '"op":"attention"|rror' "$W/ops_$f.txt" | sed "s/^/form $f: /" | tee -a "$FO"
    [ "$rc" -eq 0 ] || { echo "form $f: cuda_op_bench rc=$rc"; tail -3 "$W/ops_$f.txt"; } | tee -a "$FO"
  done
  python3 -c 'import json,sys,re,collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
  m = re.match(r"form (\w+): (\{.*\})", l)
  if m:
    r = json.loads(m.group(2))
    if "us" in r: rows[(r["batch"], r["context"], r["query_len"], r["head_dim"])].append((m.group(1), r["us"], r["TFLOPs"]))
for k, v in rows.items():
  print("%dx%dx%d d%d: " % k + "  ".join("%s %.1f us (%.0f TFLOP/s)" % x for x in v))
big = [x for x in rows.get((1, 4096, 4096, 128), []) if x[0] != "fa2"]
if big: print("fastest at 1x4096x4096: form %s" % min(big, key=lambda x: x[1])[0])' "$FO" 2>&1 | tee -a "$FO"
  # The e2e's new form: CUDA_PFA_NEW, else the fastest form above.
  [ -z "${CUDA_PFA_NEW:-}" ] && new=$(sed -n 's/^fastest at 1x4096x4096: form //p' "$FO" | tail -1)
  [ -z "$new" ] && new=4

  # End to end: 4,096-token prefill, W8A8 and BF16, the new form and form 0.
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3"
  for t in w8a8:$new w8a8:0 bf16:$new bf16:0; do
    local dt=${t%%:*} f=${t#*:} extra=""
    [ "$dt" = w8a8 ] && extra="--synthetic-dtype w8a8"
    [ "$(left)" -lt 24 ] && { echo "skipped $dt form $f: $(left) s of ${B}s left" | tee -a "$FE"; continue; }
    local t0=$(date +%s)
    local lim=$(( $(left) + 3 )); [ "$lim" -gt 45 ] && lim=45
    STRATA_CUDA_PREFILL_WGMMA_FORM=$f timeout $lim $S $extra 2>"$W/e2e.err" | \
      grep -oE '"prefill_tokens_per_s": *[0-9.]+' | sed "s/^/$dt form $f: /" | tee -a "$FE"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$dt form $f failed:"; tail -3 "$W/e2e.err"; } | tee -a "$FE"
    echo "  ($(( $(date +%s) - t0 )) s)" >> "$FE"
  done
  # The kernel's SASS in brief (where cuobjdump is installed): instructions per form.
  if command -v cuobjdump >/dev/null && [ "$(left)" -gt 5 ]; then
    timeout 20 cuobjdump -sass "$BUILD/bin/libstrata-backend-cuda.so" 2>/dev/null | awk '
      /Function : .*WgmmaPrefillKernel/ { name = $3 }
      /Function : / && !/WgmmaPrefillKernel/ { name = "" }
      name != "" && /HGMMA|UTMALDG|MUFU.EX2|SYNCS|BAR|WARPSYNC/ { for (i = 1; i <= NF; ++i) if ($i ~ /^(HGMMA|UTMALDG|MUFU|SYNCS|BAR|WARPSYNC)/) { split($i, a, "."); c[name " " a[1]]++ } }
      END { for (k in c) print k, c[k] }' | sort | tee -a "$FT"
  fi
  echo "=== cuda_pfa done ($(left) s left of ${B}s)" | tee -a "$FE"
}

# Why FP8 serving at ~256 concurrent sequences was slower than BF16 (forward 7.64 vs 6.24 ms a
# step, docs/benchmarks.md "strata serve with 256 concurrent clients"): a step's products at 256
# tokens per format and 8-bit GEMM choice (FP8/W8A8 take the wgmma GEMM up to 256 tokens and
# cuBLASLt beyond), so the default can follow the faster one. ~40 s. Targets: quant_matmul_bench.
# lead_defaults (2026-12-03 session 2): the two defaults changed from the session's measurements,
# checked against the old ones in one run (~100 s), into $OUT/lead_defaults.txt:
#   1. the tests their paths touch (the one-wave stream GEMV config; FP8 beyond 128 tokens on
#      cuBLASLt): cuda_quant_test Stream* / Tiled* / EightBitGemm* / Fp8*;
#   2. W4A16 batch-1 decode, the one-wave default vs STRATA_CUDA_QGEMV_ONE_WAVE=0 (the cost model);
#      W8A16 batch-1, the mma GEMV (default) vs the streaming one with the one-wave config;
#   3. FP8 products at 160 / 256 tokens, default (cuBLASLt above 128) vs
#      STRATA_CUDA_FP8_WGMMA_MAX_TOKENS=256 (the old bound).
phase_lead_defaults() {
  local F="$OUT/lead_defaults.txt" W=/tmp/strata-lead-defaults
  rm -rf "$W"; mkdir -p "$W"; : > "$F"
  echo "=== lead_defaults ($(date -u +%H:%M:%S) UTC)" >> "$F"
  # (The tests of step 1 passed in call C of 2026-12-03, cut at 40 s after EightBitGemmsMatchReference;
  # the benches below come first now.)
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --prompt-tokens 128 --gen-tokens 128 --synthetic-dtype int4-g128 -r 3"
  local lab e
  # W8A16: the default (tensor-core mma GEMV) against the streaming GEMV, which now takes the
  # one-wave configuration too (it measured 282.9 tok/s with the cost model's, mma 318.9).
  for lab in mma stream_one_wave; do
    e=""; [ $lab = stream_one_wave ] && e="STRATA_CUDA_QGEMV_KERNEL=stream"
    env $e timeout 35 ${S/int4-g128/int8} > "$W/b.json" 2> "$W/b.err"
    echo "w8a16 b1 $lab rc=$?: $(grep -ho '"decode_tokens_per_s"[^,}]*' "$W/b.json" | head -1)" >> "$F"
  done
  for lab in default old_bound; do
    e=""; [ $lab = old_bound ] && e="STRATA_CUDA_FP8_WGMMA_MAX_TOKENS=256"
    env $e timeout 30 "$BUILD/bin/quant_matmul_bench" --ops layer --formats fp8 --tokens 160,256 --reps 5 2>&1 | \
      grep -E '^\{|rror' | sed "s/^/$lab /" >> "$F"
  done
  # W4A16 again (one-wave 391.9 vs cost model 340.4 in call C).
  for lab in one_wave cost_model; do
    e=""; [ $lab = cost_model ] && e="STRATA_CUDA_QGEMV_ONE_WAVE=0"
    env $e timeout 35 $S > "$W/b.json" 2> "$W/b.err"
    echo "w4a16 b1 $lab rc=$?: $(grep -ho '"decode_tokens_per_s"[^,}]*' "$W/b.json" | head -1)" >> "$F"
  done
  cat "$F"
}

# lead_e2e: issue 28's 128-sequence figures end to end with main's defaults (~60 s):
# strata bench, 128 requests 128/128, --max-num-seqs 128, W8A8 then FP8, into $OUT/lead_e2e.txt.
phase_lead_e2e() {
  local F="$OUT/lead_e2e.txt" d
  : > "$F"
  local R="--num-requests 128 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 --output-len-max 128"
  for d in w8a8 fp8; do
    timeout 30 "$BUILD/bin/strata" bench --synthetic llama3-8b --device cuda --json --synthetic-dtype $d $R \
      --max-num-seqs 128 --max-batched-tokens 8192 > /tmp/strata-lead-e2e.json 2>&1
    echo "$d 128 seqs rc=$?: $(grep -oE '"(output_tokens_per_s|forward_ms_per_step|tpot_ms_p50|steps)": *[0-9.]+|[Ee]rror.*' /tmp/strata-lead-e2e.json | tr '\n' ' ')" >> "$F"
  done
  cat "$F"
}

phase_serve256_diag() {
  local F="$OUT/serve256_diag.txt" o
  : > "$F"
  for o in "" "quant_gemm=cublas" "wgmma_token_tile=128" "quant_gemm=wgmma"; do
    echo "=== products at 256 tokens, device options '${o:-default}'" >> "$F"
    timeout 25 "$BUILD/bin/quant_matmul_bench" --ops layer --formats bf16,fp8,w8a8 --tokens 256 --reps 5 \
      ${o:+--device-options "$o"} 2>&1 | grep -E "^\{|rror" >> "$F"
    echo "rc=$?" >> "$F"
  done
  cat "$F"
}

phase_serve256() {
  for flags in "bf16:" "fp8:--synthetic-dtype fp8 --kv-dtype fp8"; do
    stamp "strata serve, 256 concurrent clients, ${flags%%:*}"
    STRATA_HTTP_LEVELS=256 STRATA_HTTP_MAX_NUM_SEQS=auto STRATA_HTTP_REQUESTS=768 STRATA_HTTP_TAG="${flags%%:*}" \
      STRATA_HTTP_MODEL_FLAGS="${flags#*:}" BUILD="$BUILD" OUT="$OUT" timeout 280 bash bench/gpu/serving.sh http
  done
}

# cuda_fp8acc (issue 28 item 5, helper cuda-fp8acc; never run on a GPU yet): the FP8 wgmma
# GEMM's promoted accumulation (device option fp8_promote=on|256, env STRATA_CUDA_FP8_PROMOTE,
# default off: every 128 (on) or 256 of K the tensor cores' partial sums go into separate f32
# registers).
# In order, each step skipped (said so) when its minimum does not fit in what is left of
# CUDA_FP8ACC_BUDGET seconds (default 60; 130 runs every step), all into $OUT/cuda-fp8acc.txt:
#   1. cuda_quant_test Fp8LongKPromotedAccumulation (~15 s): FP8 384 x 14,336 (the down
#      product's K), 1..256 tokens, split-K auto / 1 / 8, promotion off, on and 256, against
#      float64: its "worst |err| / max|ref|" lines are the finding (promotion asserted within 2e-3);
#   2. the cost: quant_matmul_bench --ops layer --formats fp8 --tokens 128,256 --reps 5, default,
#      fp8_promote=on, fp8_promote=256 (~12 s each; step_ms medians);
#   3. the existing FP8 / 8-bit GEMM tests with promotion forced on (STRATA_CUDA_FP8_PROMOTE=on:
#      K of 1,000 and 4,096, bias, BF16 out, 300 / 4,096 tokens, the prefill options; ~40 s).
# Targets: strata-backend-cuda cuda_quant_test quant_matmul_bench.
phase_cuda_fp8acc() {
  local t_start=$SECONDS budget=${CUDA_FP8ACC_BUDGET:-60} F="$OUT/cuda-fp8acc.txt" o
  : > "$F"
  fa() { budget_step cuda_fp8acc "$@"; }  # NAME LIMIT MIN CMD...
  unset STRATA_CUDA_FP8_PROMOTE
  fa longk_test 35 10 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.Fp8LongKPromotedAccumulation'
  for o in "" "fp8_promote=on" "fp8_promote=256"; do
    fa "bench_${o:-default}" 25 10 "$BUILD/bin/quant_matmul_bench" --ops layer --formats fp8 --tokens 128,256 --reps 5 \
      ${o:+--device-options "$o"}
  done
  STRATA_CUDA_FP8_PROMOTE=on fa existing_tests_promote_on 90 15 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.Fp8*:CudaQuant.EightBitGemm*:-CudaQuant.Fp8LongKPromotedAccumulation'
  echo "=== cuda_fp8acc done ($(( SECONDS - t_start ))s of ${budget}s)" >> "$F"
  grep -E "worst \|err\||Failure|^\[  (FAILED|PASSED|SKIPPED)|^\{|^=== " "$F" | head -120
}

# cuda_g8mid (issue 28, helper cuda-g8mid): the 8-bit wgmma GEMM at 128-256 tokens, opt-in forms
# of branch cuda-g8mid (main's defaults unchanged). Run once (H200, 2026-12-03 ~19:50 UTC,
# docs/benchmarks.md "The 8-bit wgmma GEMM at 64-256 tokens: fixed costs"): wgmma_mgroup=2|4
# (activation tiles multicast across neighbouring weight tiles) 1.4-4x slower, wgmma_trigger=on and
# wgmma_hold=1 neutral in the step. Not yet run:
#   wgmma_epilogue=preload  the epilogue issues a batch's scale / bias / residual loads before its
#                           stores (the default waits for 2-3 loads per 4 outputs after each store;
#                           the sweep's :k1 grids put the fixed cost at 10-16 us a product)
# 1) the forced-form tests (three side by side, <= 30 s), 2) the decode step's products at 128 / 256
# tokens (quant_matmul_bench --ops layer) default vs wgmma_epilogue=preload (FP8 and W8A8; FP8 above
# 128 tokens goes to cuBLASLt on main, so 3) FP8 at 256 with quant_gemm=wgmma with and without it),
# 4) per-product times (wgmma_sweep --mgroup 1, FP8, ~5 s), 5) FP8 step products with preload +
# trigger, preload + 128-row tiles, ... as the budget allows. All in $OUT/cuda-g8mid.txt as they come
# (the tests also in cuda-g8mid_test_{a,b,c}.txt).
# CUDA_G8MID_BUDGET seconds (default 90); each step has its own timeout and is skipped (said so)
# when fewer than its minimum seconds are left.
# Targets: strata-backend-cuda cuda_quant_test quant_matmul_bench cuda_wgmma_gemm_choice_test wgmma_sweep
phase_cuda_g8mid() {
  local t_start=$SECONDS budget=${CUDA_G8MID_BUDGET:-90} F="$OUT/cuda-g8mid.txt" o
  : > "$F"
  g8() { budget_step cuda_g8mid "$@"; }  # NAME LIMIT MIN CMD...
  unset STRATA_CUDA_WGMMA_MGROUP STRATA_CUDA_WGMMA_HOLD STRATA_CUDA_WGMMA_TRIGGER STRATA_CUDA_WGMMA_EPILOGUE
  [ -x "$BUILD/bin/cuda_wgmma_gemm_choice_test" ] &&
    g8 choice_test 5 3 "$BUILD/bin/cuda_wgmma_gemm_choice_test" --gtest_color=no --gtest_brief=1
  # The three forced-form tests side by side (CPU float64 references), 30 s.
  local pa pb pc
  stamp "cuda_g8mid forms tests (limit 30s)"
  timeout 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.EightBitGemmPreloadedEpilogueMatchesReference' > "$OUT/cuda-g8mid_test_c.txt" 2>&1 &
  pc=$!
  timeout 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.EightBitGemmMulticastGroupsMatchReference' > "$OUT/cuda-g8mid_test_a.txt" 2>&1 &
  pa=$!
  timeout 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
    --gtest_filter='CudaQuant.EightBitGemmMulticastWideAndHoldMatchReference' > "$OUT/cuda-g8mid_test_b.txt" 2>&1 &
  pb=$!
  wait "$pc"; echo "=== forms test c rc=$? at $(( SECONDS - t_start ))s" >> "$OUT/cuda-g8mid_test_c.txt"
  wait "$pa"; echo "=== forms test a rc=$? at $(( SECONDS - t_start ))s" >> "$OUT/cuda-g8mid_test_a.txt"
  wait "$pb"; echo "=== forms test b rc=$? at $(( SECONDS - t_start ))s" >> "$OUT/cuda-g8mid_test_b.txt"
  cat "$OUT/cuda-g8mid_test_c.txt" "$OUT/cuda-g8mid_test_a.txt" "$OUT/cuda-g8mid_test_b.txt" >> "$F"
  g8 bench_default 24 15 "$BUILD/bin/quant_matmul_bench" --ops layer --formats fp8,w8a8 --tokens 128,256 --reps 5
  g8 bench_preload 24 15 "$BUILD/bin/quant_matmul_bench" --ops layer --formats fp8,w8a8 --tokens 128,256 --reps 5 \
    --device-options "wgmma_epilogue=preload"
  for o in "quant_gemm=wgmma" "quant_gemm=wgmma;wgmma_epilogue=preload"; do
    g8 "bench_fp8_256_$o" 8 6 "$BUILD/bin/quant_matmul_bench" --ops layer --formats fp8 --tokens 256 --reps 5 \
      --device-options "$o"
  done
  [ -x "$BUILD/bin/wgmma_sweep" ] &&
    g8 sweep 20 8 "$BUILD/bin/wgmma_sweep" --mgroup 1 --formats fp8 --tokens 128,256 --reps 5
  for o in "wgmma_epilogue=preload;wgmma_trigger=on" "wgmma_epilogue=preload;wgmma_wide=off" "quant_gemm=cublas" \
           "wgmma_mgroup=4" "wgmma_trigger=on"; do
    g8 "bench_$o" 12 9 "$BUILD/bin/quant_matmul_bench" --ops layer --formats fp8 --tokens 128,256 --reps 5 \
      --device-options "$o"
  done
  echo "=== cuda_g8mid done ($(( SECONDS - t_start ))s of ${budget}s)" >> "$F"
  grep -E "Failure|^\[  (FAILED|PASSED|SKIPPED)|^\{\"bench\":\"quant|wgmma_sweep_(best|layer)|^=== " "$F" | head -120
}

# cuda_b1 (issue 28, helper cuda-b1): batch-1 decode on CUDA, the opt-in forms of branch cuda-b1
# (none has run on a GPU yet; main's defaults are unchanged):
#   STRATA_CUDA_PDL_SMALL=on      the decode attention kernels, their split combine, rms_norm and
#                                 silu_mul start with programmatic dependent launch (pdl_small=on)
#   STRATA_CUDA_QGEMV_MMA_FUSE=1  the tensor-core GEMV (STRATA_CUDA_QGEMV_KERNEL=mma; main's default
#                                 is the streaming GEMV) computes matmul_ex's one-token prologue
#   STRATA_CUDA_QGEMV_HALFX=1     ... with INT8's staged x stored as FP16 (not converted per step)
#   STRATA_CUDA_QGEMV_PREFETCH=1  ... with grouped INT4 scales / zeros prefetched into L2
#   STRATA_CUDA_QGEMV_ROUND=4     ... (with HALFX=1) INT8 in 4-chunk rounds at 3 blocks per SM
# Tests (with those forms forced), then batch-1 decode 128/128 -r 3 per configuration, most
# telling first (W8A16 default vs the new mma form vs pdl_small, W4A16 likewise), then sweeps,
# an eager op profile, SASS of the mma GEMV and an nsys summary as the budget allows. At most
# three files: $OUT/cuda-b1_tests.txt, cuda-b1_bench.txt, cuda-b1_profile.txt.
# CUDA_B1_BUDGET seconds (default 150; 115 runs the tests and the first three or four runs, 300
# most of it); each step has its own timeout and is skipped (said so) when it could overrun.
# Targets: strata strata-backend-cuda cuda_backend_test cuda_graph_test cuda_kv8_test
# cuda_decode_kernel_choice_test cuda_quant_test qgemv_sweep
phase_cuda_b1() {
  local P0=$SECONDS budget=${CUDA_B1_BUDGET:-150} W=/tmp/strata-cuda-b1
  local FT="$OUT/cuda-b1_tests.txt" FB="$OUT/cuda-b1_bench.txt" FP="$OUT/cuda-b1_profile.txt"
  rm -rf "$W"; mkdir -p "$W"; : > "$FT"; : > "$FB"; : > "$FP"
  b1_left() { echo $(( budget - (SECONDS - P0) )); }
  b1_fits() { (( SECONDS - P0 + $1 <= budget + 5 )); }
  echo "=== cuda_b1 ($(date -u +%H:%M:%S) UTC, commit $(git rev-parse --short HEAD 2>/dev/null), budget ${budget}s)" | tee -a "$FT" "$FB"
  env | grep -E "^STRATA_CUDA_(PDL|DECODE|QGEMV)" | sed 's/^/WARNING: set in the environment: /' | tee -a "$FT"
  local NEW="STRATA_CUDA_QGEMV_KERNEL=mma STRATA_CUDA_QGEMV_MMA_FUSE=1 STRATA_CUDA_QGEMV_HALFX=1 STRATA_CUDA_QGEMV_PREFETCH=1 STRATA_CUDA_PDL_SMALL=on"
  # 1. Tests, six processes at once, each at most 30 s: the new forms' tests (pdl_small's layer
  # chain, the fused mma prologue) and the decode / GEMV tests they touch, with the forms forced.
  ( timeout 10 "$BUILD/bin/cuda_decode_kernel_choice_test" --gtest_color=no > "$W/t_choice.txt" 2>&1; echo $? > "$W/t_choice.rc" ) &
  ( STRATA_CUDA_PDL_SMALL=on timeout 30 "$BUILD/bin/cuda_backend_test" --gtest_color=no \
      --gtest_filter='CudaPdlSmall.*:CudaMmaDecode.*:*/CudaOps.RopeAttentionEqualsRopeKvWriteThenAttention/bf16:*/CudaOps.BadInputIsAnErrorNotACrash/bf16' \
      > "$W/t_backend.txt" 2>&1; echo $? > "$W/t_backend.rc" ) &
  ( STRATA_CUDA_PDL_SMALL=on timeout 30 "$BUILD/bin/cuda_graph_test" --gtest_color=no > "$W/t_graph.txt" 2>&1; echo $? > "$W/t_graph.rc" ) &
  ( STRATA_CUDA_PDL_SMALL=on STRATA_KV8_TEST_CACHES=FP8 timeout 30 "$BUILD/bin/cuda_kv8_test" --gtest_color=no \
      --gtest_filter='CudaKv8Ops.DecodeMmaKernelFusedRopeAttention' > "$W/t_kv8.txt" 2>&1; echo $? > "$W/t_kv8.rc" ) &
  ( timeout 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no \
      --gtest_filter='CudaQuant.Tiled*:CudaQuant.MatmulExPrologueAndAccumulateOnQuantizedWeights' \
      > "$W/t_quant.txt" 2>&1; echo $? > "$W/t_quant.rc" ) &
  ( STRATA_CUDA_QGEMV_ROUND=4 STRATA_CUDA_QGEMV_HALFX=1 STRATA_CUDA_QGEMV_PREFETCH=1 timeout 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.Tiled*' \
      > "$W/t_quant_r4.txt" 2>&1; echo $? > "$W/t_quant_r4.rc" ) &
  wait_children
  local t all=passed
  for t in choice backend graph kv8 quant quant_r4; do
    local rc=$(cat "$W/t_$t.rc" 2>/dev/null || echo 99) st=passed
    [ "$rc" = 124 ] && st="TIMED OUT"
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && st="FAILED (rc $rc)"
    grep -qE "^\[  FAILED  \]" "$W/t_$t.txt" && st=FAILED
    [ "$st" = passed ] || all="NOT ALL PASSED"
    echo "  $t: $st ($(grep -c '^\[       OK' "$W/t_$t.txt") ok, $(grep -c '^\[  SKIPPED' "$W/t_$t.txt") skipped)" | tee -a "$FT"
  done
  echo "cuda_b1 TESTS: $all ($(( SECONDS - P0 ))s)" | tee -a "$FT"
  for t in choice backend graph kv8 quant quant_r4; do
    echo "--- $t" >> "$FT"
    grep -E "^\[       OK|^\[  FAILED|^\[  SKIPPED|Failure|Expected|Which is|differs|outside|^\[==========\]" "$W/t_$t.txt" | head -60 >> "$FT"
  done
  # 2. Batch-1 decode 128/128, -r 3, one process per configuration, most telling first.
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --prompt-tokens 128 --gen-tokens 128"
  b1_run() {  # label format [ENV=value ...]
    local label=$1 d=$2
    shift 2
    if ! b1_fits 24; then echo "skipped $label: $(b1_left)s of ${budget}s left" | tee -a "$FB"; return; fi
    local t0=$SECONDS
    env "$@" timeout 35 $S --synthetic-dtype $d -r 3 > "$W/b_$label.json" 2> "$W/b_$label.err"
    local rc=$?
    echo "$label ($d; ${*:-defaults}) rc=$rc $(( SECONDS - t0 ))s: $(grep -ho '"decode_tokens_per_s"[^,}]*' "$W/b_$label.json" | head -1) $(grep -ho '"decode_graph_replays"[^,}]*' "$W/b_$label.json" | head -1)" | tee -a "$FB"
    [ $rc = 0 ] || tail -5 "$W/b_$label.err" | tee -a "$FB"
  }
  # W8A16: main's default (streaming GEMV) against the new mma form ($NEW) and the default with
  # pdl_small; then W4A16 likewise; the rest only with a larger budget.
  b1_run int8_default int8
  b1_run int8_new int8 $NEW
  b1_run int8_pdl_small int8 STRATA_CUDA_PDL_SMALL=on
  b1_run int4_default int4-g128
  b1_run int4_pdl_small int4-g128 STRATA_CUDA_PDL_SMALL=on
  b1_run int4_new int4-g128 $NEW
  b1_run int8_new_r4 int8 $NEW STRATA_CUDA_QGEMV_ROUND=4
  b1_run int8_mma_plain int8 STRATA_CUDA_QGEMV_KERNEL=mma
  # The one-token W8A16 sweep (quick: mma, mma_fused, default, read, every depth-8 configuration).
  if b1_fits 35; then
    timeout 35 "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1 --formats w8a16 --quick 1 > "$W/sweep_w8.jsonl" 2>&1
    echo "sweep w8a16 rc=$?" | tee -a "$FP"
    sed -e 's/"bench":"qgemv_sweep","format":"w8a16","zeros":0,"tokens":1,//' -e 's/,"copies":[0-9]*//' \
      "$W/sweep_w8.jsonl" | head -150 >> "$FP"
    grep qgemv_sweep_best "$W/sweep_w8.jsonl" | tee -a "$FB"
  else
    echo "skipped sweep: $(b1_left)s left" | tee -a "$FP"
  fi
  # W4A16 with zero points (what --synthetic-dtype int4-g128 makes): the mma GEMV with its group
  # scales prefetched into L2 and without (the sweep's mma_fused variant sets PREFETCH=1 itself;
  # pf=1 also sets it for the plain mma variant), beside the streaming one.
  local pf
  for pf in 1 0; do
    if b1_fits 35; then
      STRATA_CUDA_QGEMV_PREFETCH=$pf timeout 35 "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1 --formats w4a16 --zeros 1 --quick 1 \
        > "$W/sweep_w4_pf$pf.jsonl" 2>&1
      echo "sweep w4a16 zeros prefetch=$pf rc=$?" | tee -a "$FP"
      grep -E '"variant":"(mma|mma_fused|default|read)"' "$W/sweep_w4_pf$pf.jsonl" | \
        sed -e 's/"bench":"qgemv_sweep","format":"w4a16","zeros":1,"tokens":1,//' -e 's/,"copies":[0-9]*//' >> "$FP"
      grep qgemv_sweep_best "$W/sweep_w4_pf$pf.jsonl" | sed "s/^/prefetch=$pf /" | tee -a "$FB"
    else
      echo "skipped sweep w4a16 prefetch=$pf: $(b1_left)s left" | tee -a "$FP"
    fi
  done
  b1_run bf16_default bf16
  b1_run bf16_pdl_small bf16 STRATA_CUDA_PDL_SMALL=on
  echo "--- full json" >> "$FB"
  for f in "$W"/b_*.json; do echo "$(basename "$f"): $(head -c 1500 "$f")" >> "$FB"; done
  # 3. Op profile of one eager int8 (W8A16, default GEMV) batch-1 run (32 generated tokens).
  if b1_fits 40; then
    STRATA_CUDA_PROFILE=1 timeout 45 $BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --synthetic-dtype int8 \
      -r 1 --prompt-tokens 128 --gen-tokens 32 --enforce-eager > "$W/p.txt" 2>&1
    echo "profile rc=$?" | tee -a "$FP"
    sed -n '/strata cuda op profile/,$p' "$W/p.txt" | head -60 >> "$FP"
    grep -ho '"decode_tokens_per_s"[^,}]*' "$W/p.txt" | head -1 >> "$FP"
  else
    echo "skipped profile: $(b1_left)s left" | tee -a "$FP"
  fi
  # SASS of the tensor-core GEMV's batch-1 kernels (INT8 and INT4 with whole-chunk groups, 3-chunk
  # rounds, x staged, BF16 out): the per-step instruction chain, for the W8A16 bound.
  local qobj="$BUILD/backends/cuda/CMakeFiles/strata_backend_cuda_impl.dir/__/__/kernels/cuda/quant_gemv_mma.cu.o"
  if [ -f "$qobj" ] && [ -x /usr/local/cuda/bin/cuobjdump ]; then
    local v
    for v in 0:1 1:0; do  # INT8 with FP16 staging, INT4; no prologue
      echo "--- SASS QuantGemvTiledKernel<values ${v%%:*}, chunk groups, round 3, staged, bf16, plain, half x ${v#*:}>" >> "$FP"
      /usr/local/cuda/bin/cuobjdump -sass "$qobj" 2>/dev/null | awk -v pat="QuantGemvTiledKernelILi${v%%:*}ELb1ELi3ELb1E13__nv_bfloat16Li0ELb${v#*:}E" \
        '/Function :/ {on = index($0, pat) > 0} on' | grep -vE "^\s*/\* [0-9a-fx]+ \*/\s*$" | head -700 >> "$FP"
    done
  else
    echo "no SASS (cuobjdump or $qobj missing)" >> "$FP"
  fi
  # 4. Last, if the budget allows: an Nsight Systems trace of graph-replayed int8 decode
  # (kernel durations inside the replayed graphs, and the gaps between them).
  local NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$NSYS" ] && b1_fits 60; then
    timeout 60 "$NSYS" profile --cuda-graph-trace=node -t cuda -o "$W/trace" --force-overwrite true \
      $BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --synthetic-dtype int8 -r 1 \
      --prompt-tokens 128 --gen-tokens 64 > "$W/nsys.txt" 2>&1
    echo "nsys rc=$?" | tee -a "$FP"
    timeout 30 "$NSYS" stats --report cuda_gpu_kern_sum --format csv "$W/trace.nsys-rep" 2>&1 | head -40 >> "$FP"
  else
    echo "no nsys step (nsys: ${NSYS:-none}; $(b1_left)s left)" | tee -a "$FP"
  fi
  echo "=== cuda_b1 done ($(( SECONDS - P0 ))s of ${budget}s)" | tee -a "$FT"
}

# cuda_gemv_sass (issue 28, helper cuda-gemv-sass): the W4A16 streaming GEMV's lean loop, opt-in
# STRATA_CUDA_QGEMV_LEAN=1 (INT4 g128, one token with its fused rms_norm / silu_mul prologue, depth
# 8: the x-sum arithmetic with 54.5 SASS instructions per 512-byte chunk instead of 121.5, counted
# from the sm_90a SASS; docs/benchmarks.md). Not yet run on a GPU. Steps, each with its own timeout
# and skipped (said so) when it could overrun CUDA_GEMV_SASS_BUDGET (default 90 s):
#   1. cuda_quant_test CudaQuant.Stream* (float64 reference; StreamGemvLeanFormFusesMatmulExPrologues
#      forces the lean form), and the same tests with STRATA_CUDA_QGEMV_LEAN=1 set for the process;
#   2. qgemv_sweep one token, W4A16 with zero points, quick: per product and 32-layer sums of
#      default (old) vs lean (new) vs xsum vs read;
#   3. strata bench --synthetic llama3-8b --synthetic-dtype int4-g128 128/128 -r 3, LEAN=1 then default.
# Two files: $OUT/cuda-gemv-sass_tests.txt, $OUT/cuda-gemv-sass_bench.txt.
# Targets: strata strata-backend-cuda cuda_quant_test qgemv_sweep
phase_cuda_gemv_sass() {
  local P0=$SECONDS budget=${CUDA_GEMV_SASS_BUDGET:-90} W=/tmp/strata-cuda-gemv-sass
  local FT="$OUT/cuda-gemv-sass_tests.txt" FB="$OUT/cuda-gemv-sass_bench.txt"
  rm -rf "$W"; mkdir -p "$W"; : > "$FT"; : > "$FB"
  gs_left() { echo $(( budget - (SECONDS - P0) )); }
  gs_fits() { (( SECONDS - P0 + $1 <= budget + 5 )); }
  echo "=== cuda_gemv_sass ($(date -u +%H:%M:%S) UTC, commit $(git rev-parse --short HEAD 2>/dev/null), budget ${budget}s)" | tee -a "$FT" "$FB"
  env | grep -E "^STRATA_CUDA_QGEMV" | sed 's/^/WARNING: set in the environment: /' | tee -a "$FT"
  # 1. Tests: two processes at once (the lean test alone forces the form; the second run sets it
  # for every Stream* test of the process).
  ( timeout 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.Stream*' \
      > "$W/t_stream.txt" 2>&1; echo $? > "$W/t_stream.rc" ) &
  ( STRATA_CUDA_QGEMV_LEAN=1 timeout 30 "$BUILD/bin/cuda_quant_test" --gtest_color=no --gtest_filter='CudaQuant.Stream*' \
      > "$W/t_lean_env.txt" 2>&1; echo $? > "$W/t_lean_env.rc" ) &
  wait_children
  local t all=passed
  for t in stream lean_env; do
    local rc=$(cat "$W/t_$t.rc" 2>/dev/null || echo 99) st=passed
    [ "$rc" = 124 ] && st="TIMED OUT"
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && st="FAILED (rc $rc)"
    grep -qE "^\[  FAILED  \]" "$W/t_$t.txt" && st=FAILED
    [ "$st" = passed ] || all="NOT ALL PASSED"
    echo "  $t: $st ($(grep -c '^\[       OK' "$W/t_$t.txt") ok, $(grep -c '^\[  SKIPPED' "$W/t_$t.txt") skipped)" | tee -a "$FT"
  done
  echo "cuda_gemv_sass TESTS: $all ($(( SECONDS - P0 ))s)" | tee -a "$FT"
  for t in stream lean_env; do
    echo "--- $t" >> "$FT"
    grep -E "^\[       OK|^\[  FAILED|^\[  SKIPPED|Failure|Expected|Which is|worst error|^\[==========\]" "$W/t_$t.txt" | head -120 >> "$FT"
  done
  # 2. The one-token W4A16 sweep with zero points: default (old), lean (new), xsum, read per product.
  if gs_fits 30; then
    timeout 30 "$BUILD/bin/qgemv_sweep" --reps 10 --tokens 1 --formats w4a16 --zeros 1 --quick 1 > "$W/sweep.jsonl" 2>&1
    echo "sweep w4a16 zeros=1 rc=$? ($(( SECONDS - P0 ))s)" | tee -a "$FB"
    grep -E '"variant":"(default|lean|xsum|read|mma|unfused)"' "$W/sweep.jsonl" | \
      sed -e 's/"bench":"qgemv_sweep","format":"w4a16",//' -e 's/,"copies":[0-9]*//' | tee -a "$FB"
    grep -E 'error|qgemv_sweep_best' "$W/sweep.jsonl" | tee -a "$FB"
  else
    echo "skipped sweep: $(gs_left)s left" | tee -a "$FB"
  fi
  # 3. Batch-1 decode 128/128 -r 3: lean (new) first, then main's default (old).
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --synthetic-dtype int4-g128 --prompt-tokens 128 --gen-tokens 128 -r 3"
  local label
  for label in lean default; do
    if ! gs_fits 24; then echo "skipped bench $label: $(gs_left)s left" | tee -a "$FB"; continue; fi
    local t0=$SECONDS envs=""
    [ "$label" = lean ] && envs="STRATA_CUDA_QGEMV_LEAN=1"
    env $envs timeout 35 $S > "$W/b_$label.json" 2> "$W/b_$label.err"
    local rc=$?
    echo "bench int4-g128 $label (${envs:-defaults}) rc=$rc $(( SECONDS - t0 ))s: $(grep -ho '"decode_tokens_per_s"[^,}]*' "$W/b_$label.json" | head -1) $(grep -ho '"decode_graph_replays"[^,}]*' "$W/b_$label.json" | head -1)" | tee -a "$FB"
    [ $rc = 0 ] || tail -5 "$W/b_$label.err" | tee -a "$FB"
  done
  echo "=== cuda_gemv_sass done ($(( SECONDS - P0 ))s of ${budget}s)" | tee -a "$FT" "$FB"
}

for phase in $PHASES; do
  case "$phase" in
    build) ;;
    # Any phase_NAME function defined above is a phase (no list to keep in step).
    *) if declare -F "phase_$phase" >/dev/null; then "phase_$phase"
       else stamp "unknown phase '$phase' ($(declare -F | sed -n 's/^declare -f phase_//p' | tr '\n' ' '))"; fi ;;
  esac
done
stamp "done"
