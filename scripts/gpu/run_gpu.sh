#!/usr/bin/env bash
# One reproducible GPU run: unpack the build dependencies carried in .gpu/ (made by
# scripts/gpu/prepare.sh on the build machine), configure and build everything, then the
# phases asked for, in the order given (default: all, in this order; `build` alone builds and
# runs nothing, for commands that run their own measurements afterwards):
#   tests    every CUDA test (op tests twice), then all ctest tests
#   models   end-to-end model checks on the CUDA backend against llama2.c / HF references
#   bench    the Llama-3-8B-shape figures of issue 3 (decode with and without decode graphs,
#            4096-token prefill, 32 and 128 concurrent sequences)
#   ops      CUDA op timings at Llama-3-8B shapes
#   batching issue 4: continuous vs static batching, shared-prefix TTFT
#   batching8b issue 4: continuous vs static batching on the Llama-3-8B shape
#   http     issue 5: HTTP server vs in-process engine (both: scripts/gpu/bench_serving_gpu.sh)
#   gemm     the sm_90 wgmma GEMM's op test, then decode-batch GEMM timings (cuBLASLt and the
#            wgmma kernel; eager and graph-replayed), then
#            serving at 128 sequences with each GEMM path alternately (STRATA_GEMM_VARIANTS);
#            a failed test stops the run (a hung kernel would eat every later phase's time)
#   profile  GPU time per op and shape (device option profile=on, backends/cuda/op_profiler.h)
#            of the 128- and 32-sequence serving runs, eager and with decode graphs (where
#            a replayed graph is one graph_launch: the decode step's GPU time)
#   attention  the decode attention tests, the KV read ceilings (kv_read_bench), its op sweep (STRATA_OP_BENCH=decode_attention:
#            the GQA and the tensor-core decode kernels at serving batch sizes), the attention
#            cases of STRATA_OP_BENCH=attention (default path; prefill 64 x 128 included) and 128 and
#            32 concurrent sequences with decode_attention=gqa and the default, alternately
#   async    overlapped scheduling on and off alternately (scripts/gpu/async_ab.sh; 128 and 32
#            sequences, batch-1 decode; STRATA_ASYNC_ROUNDS rounds, default 2)
#   prefill  the prefill attention kernels: their tests (a failure stops the run), the
#            attention op cases with prefill_attention=wgmma and =fa2, then the 4096-token
#            prefill and 128 concurrent sequences with each, alternately (STRATA_PREFILL_ROUNDS
#            rounds, default 2)
#   ncu      Nsight Compute profile of the wgmma and FA2 prefill attention kernels on a
#            4,096-token prompt (scripts/gpu/ncu_prefill_attention.sh; not in the default set)
#   gemmconfigs  the cuBLASLt configuration tables: their GPU test, then 128 sequences with the
#            built-in table and with gemm_configs=none alternately (scripts/gpu/gemm_configs_ab.sh;
#            STRATA_GEMMCONFIGS_ROUNDS rounds, default 2; STRATA_GEMMCONFIGS_SEARCH_TOKENS=128
#            also runs bench/cuda/gemm_search and a third mode with its table)
#   clocks   SM clock, power draw and throttle reasons (nvidia-smi, every 50 ms) during a
#            128-sequence serving run: whether the run is power-capped
#   logprobs requests that want logprobs: the engine sampling test on the GPU, then 1, 32 and
#            128 sequences (Llama-3-8B shape, top-p 0.9, 128 in / 128 out) without logprobs,
#            and with --logprobs 5 (computed on the device, ABI 1.7), one line each
#   quant    issue 28: the quantized matmul tests (cuda_quant_test: every ABI 1.9 weight format
#            against a float64 reference; a failure stops the run), then the weight products of
#            Llama-3-8B decode (1 and 128 tokens) and prefill (4096 tokens) steps per format
#            beside BF16 (bench/cuda/quant_matmul_bench.cpp, JSON lines in quant_bench.jsonl)
#   ab       batch-1 decode alternately from a base commit's build and this one, on this
#            machine (scripts/gpu/ab_base.sh; needs .gpu/base.tar.gz; not in the default set)
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

phase_async() {
  stamp "overlapped scheduling on / off, alternately"
  BUILD="$BUILD" OUT="$OUT" timeout 560 bash scripts/gpu/async_ab.sh "${STRATA_ASYNC_ROUNDS:-2}"
  python3 scripts/gpu/summarize_async.py "$OUT/async_ab.jsonl"
}

phase_gemmconfigs() {
  stamp "cuBLASLt configuration tables: their test, then serving with the built-in table and without"
  timeout 120 "$BUILD/bin/cuda_backend_test" --gtest_color=no --gtest_filter='CudaGemmConfigs.*' 2>&1 | tail -3
  BUILD="$BUILD" OUT="$OUT" timeout 540 bash scripts/gpu/gemm_configs_ab.sh "${STRATA_GEMMCONFIGS_ROUNDS:-2}" \
    "${STRATA_GEMMCONFIGS_SEARCH_TOKENS:-}"
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
  BUILD="$BUILD" OUT="$OUT" timeout 300 bash scripts/gpu/bench_serving_gpu.sh batching
}

phase_batching8b() {
  stamp "issue 4: continuous vs static batching, Llama-3-8B shape"
  BUILD="$BUILD" OUT="$OUT" timeout 450 bash scripts/gpu/bench_serving_gpu.sh batching8b
}

phase_http() {
  stamp "issue 5: HTTP server vs in-process engine"
  BUILD="$BUILD" OUT="$OUT" timeout 300 bash scripts/gpu/bench_serving_gpu.sh http
}

phase_gemm() {
  stamp "wgmma GEMM op test"
  if ! timeout 90 "$BUILD/bin/cuda_backend_test" --gtest_color=no --gtest_filter='CudaWgmmaGemm.*' 2>&1 | \
      tee "$OUT/wgmma_test.log" | grep -vE "^\[ RUN|^\[       OK" | tail -30; then
    stamp "wgmma test failed or hung: stopping"
    exit 1
  fi
  grep -q "FAILED" "$OUT/wgmma_test.log" && { stamp "wgmma test failed: stopping"; exit 1; }
  stamp "decode-batch GEMMs: cuBLASLt vs wgmma"
  STRATA_OP_BENCH=gemm STRATA_OP_BENCH_TOKENS="${STRATA_GEMM_TOKENS:-32,64,128,256}" timeout 240 \
    "$BUILD/bin/cuda_op_bench" 2>&1 | tee "$OUT/gemm_bench.log" | \
    python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{\"op\"")]
print("shape    path            tokens   eager us  frac   graph us  frac")
for r in rows:
    print("%-8s %-15s %4d %10.1f  %.3f %9.1f  %.3f" % (r["shape"], r["path"], r["tokens"], r["us"],
          r["bw_fraction_of_4.24TBps"], r["graph_us"], r["graph_bw_fraction"]))
'
  # Serving with each GEMM path, alternately on this machine (cublas = the default).
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local n=0
  for c in ${STRATA_GEMM_SEQS:-128}; do
    for v in ${STRATA_GEMM_VARIANTS:-cublas wgmma cublas wgmma}; do
      n=$((n + 1))
      stamp "$c concurrent sequences, GEMMs: $v"
      STRATA_CUDA_GEMM=$v timeout 150 $S --num-requests $c --prompt-len-min 128 --prompt-len-max 128 --output-len-min 128 \
        --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 > "$OUT/gemm_serving_${c}_${v}_$n.json" 2>/dev/null
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("output tok/s %.0f  TPOT p50 %.2f ms" % (r["output_tokens_per_s"], r["tpot_ms"]["p50"]))' "$OUT/gemm_serving_${c}_${v}_$n.json"
    done
  done
}

phase_profile() {
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  for c in ${STRATA_PROFILE_SEQS:-128 32}; do
    for mode in eager graphs; do
      stamp "op profile: $c concurrent sequences, 128 in / 128 out, $mode"
      local flag=""
      [ "$mode" = eager ] && flag="--enforce-eager"
      STRATA_CUDA_PROFILE=1 timeout 150 $S --num-requests $c --prompt-len-min 128 --prompt-len-max 128 \
        --output-len-min 128 --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 $flag \
        > "$OUT/profile_${c}_${mode}.json" 2> "$OUT/profile_${c}_${mode}.txt"
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("output tok/s %.0f  TPOT p50 %.2f ms  steps %d  forward ms/step %.2f" % (r["output_tokens_per_s"], r["tpot_ms"]["p50"], r["steps"], r["forward_ms_per_step"]))' "$OUT/profile_${c}_${mode}.json"
      sed -n '/strata cuda op profile/,$p' "$OUT/profile_${c}_${mode}.txt" | head -40
    done
  done
}

phase_attention() {
  stamp "decode attention tests"
  timeout 120 "$BUILD/bin/cuda_backend_test" --gtest_color=no \
    --gtest_filter='CudaMmaDecode.*:*Attention*' 2>&1 | tee "$OUT/attention_test.log" | grep -vE "^\[ RUN|^\[       OK" | tail -20
  grep -q "FAILED" "$OUT/attention_test.log" && { stamp "attention tests failed: stopping"; exit 1; }
  stamp "KV read ceilings per load mechanism (bench/cuda/kv_read_bench.cu)"
  if [ -x "$BUILD/bin/kv_read_bench" ]; then
    timeout 120 "$BUILD/bin/kv_read_bench" 128 192 128 1024 64 1024 32 1024 2>&1 | tee "$OUT/kv_read_bench.log"
  else
    echo "kv_read_bench not built (add it to STRATA_GPU_TARGETS)"
  fi
  stamp "decode attention sweep"
  STRATA_OP_BENCH=decode_attention timeout 200 "$BUILD/bin/cuda_op_bench" 2>&1 | tee "$OUT/decode_attention_bench.log"
  stamp "attention cases: prefill (1 x 4096, a 512-token chunk, 8 x 1024, 64 x 128) and decode, per path; rope_kv_write / rope_attention"
  STRATA_OP_BENCH=attention timeout 200 "$BUILD/bin/cuda_op_bench" 2>&1 | grep -E '"op":"(attention|rope_attention)"' | \
    grep -E '"path":"auto"|rope_attention' | tee "$OUT/attention_cases.log"
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  local n=0
  for c in ${STRATA_ATTENTION_SEQS:-128 32}; do
    for k in ${STRATA_DECODE_KERNELS:-gqa auto gqa auto}; do
      n=$((n + 1))
      stamp "$c concurrent sequences, decode_attention=$k"
      STRATA_CUDA_DECODE_ATTENTION=$k timeout 150 $S --num-requests $c --prompt-len-min 128 \
        --prompt-len-max 128 --output-len-min 128 --output-len-max 128 --max-num-seqs $c --max-batched-tokens 8192 \
        > "$OUT/serving_${c}_${k}_$n.json" 2>/dev/null
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("output tok/s %.0f  TPOT p50 %.2f ms" % (r["output_tokens_per_s"], r["tpot_ms"]["p50"]))' "$OUT/serving_${c}_${k}_$n.json"
    done
  done
}

phase_prefill() {
  stamp "prefill attention tests"
  timeout 300 "$BUILD/bin/cuda_backend_test" --gtest_color=no \
    --gtest_filter='CudaPrefillAttention.*:*Attention*' 2>&1 | tee "$OUT/prefill_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -20
  grep -qE "FAILED|Failure" "$OUT/prefill_test.log" && { stamp "prefill attention tests failed: stopping"; exit 1; }
  for k in wgmma fa2; do
    stamp "attention op cases, prefill_attention=$k"
    STRATA_CUDA_PREFILL_ATTENTION=$k STRATA_OP_BENCH=attention timeout 200 "$BUILD/bin/cuda_op_bench" 2>&1 | \
      grep -E '"op":"(attention|rope_attention)"' | grep -E '"path":"auto"' | grep -v '"query_len":1,' | \
      tee "$OUT/attention_cases_$k.log"
  done
  local S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json"
  for r in $(seq "${STRATA_PREFILL_ROUNDS:-2}"); do
    for k in wgmma fa2; do
      stamp "round $r, prefill_attention=$k: 4096-token prefill; 128 sequences"
      STRATA_CUDA_PREFILL_ATTENTION=$k timeout 120 $S --prompt-tokens 4096 --gen-tokens 2 --batch-tokens 4096 -r 3 \
        > "$OUT/prefill_${k}_$r.json"
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("prefill tok/s", r.get("prefill_tokens_per_s", r))' \
        "$OUT/prefill_${k}_$r.json"
      STRATA_CUDA_PREFILL_ATTENTION=$k timeout 150 $S --num-requests 128 --prompt-len-min 128 --prompt-len-max 128 \
        --output-len-min 128 --output-len-max 128 --max-num-seqs 128 --max-batched-tokens 8192 > "$OUT/serving128_${k}_$r.json"
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("128 seqs output tok/s %.0f" % r["output_tokens_per_s"])' \
        "$OUT/serving128_${k}_$r.json"
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

phase_ncu() {
  stamp "Nsight Compute: prefill attention kernels"
  OUT="$OUT" timeout 540 bash scripts/gpu/ncu_prefill_attention.sh "$BUILD"
}

phase_quant() {
  stamp "quantized matmul tests (float64 contract reference)"
  timeout 240 "$BUILD/bin/cuda_quant_test" --gtest_color=no 2>&1 | tee "$OUT/cuda_quant_test.log" | \
    grep -vE "^\[ RUN|^\[       OK" | tail -40
  grep -qE "FAILED|Failure" "$OUT/cuda_quant_test.log" && { stamp "quantized matmul tests failed: stopping"; exit 1; }
  stamp "Llama-3-8B step weight products per format, beside BF16"
  timeout 300 "$BUILD/bin/quant_matmul_bench" --tokens "${STRATA_QUANT_TOKENS:-1,128,4096}" \
    --formats "${STRATA_QUANT_FORMATS:-bf16,w4a16,w8a16,w8a8,fp8}" 2>&1 | tee "$OUT/quant_bench.jsonl"
}

phase_ab() {
  stamp "batch-1 decode, base commit vs this build, alternately"
  BUILD="$BUILD" OUT="$OUT" timeout 480 bash scripts/gpu/ab_base.sh "${STRATA_AB_ROUNDS:-3}"
}

for phase in $PHASES; do
  case "$phase" in
    build) ;;
    tests|models|bench|ops|gemm|batching|batching8b|http|profile|attention|prefill|ncu|ab|async|gemmconfigs|clocks|logprobs|quant) "phase_$phase" ;;
    *) stamp "unknown phase '$phase' (build tests models bench ops gemm batching batching8b http profile attention prefill ncu ab async gemmconfigs clocks logprobs quant)" ;;
  esac
done
stamp "done"
