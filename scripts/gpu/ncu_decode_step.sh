#!/usr/bin/env bash
# Nsight Compute over the kernels that make up a 128-sequence decode step (Llama-3-8B shape)
# at the GPU's own clocks: the decode-batch GEMMs of the op bench at 128 tokens (cuBLASLt and
# the wgmma kernel, eager and graph-replayed; STRATA_OP_BENCH=gemm) and the decode attention
# sweep (STRATA_OP_BENCH=decode_attention). Per kernel name and grid: launches, median
# duration, DRAM throughput (% of peak, GB/s and MB read), L2, SM and tensor-pipe activity.
# (A first version profiled a whole eager serving run: ncu spends ~0.1 s per kernel, and the
# start-up's thousands of kernels ran it past 7 minutes. The op bench's launches are few and
# known, and --launch-count bounds them.)
# Usage (repo root, on the GPU machine, after a build): bash scripts/gpu/ncu_decode_step.sh [BUILD]
source "$(dirname "$0")/ncu_env.sh" "$@"
METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
METRICS=$METRICS,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
METRICS=$METRICS,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
for sweep in gemm decode_attention; do
  echo "=== STRATA_OP_BENCH=$sweep"
  STRATA_OP_BENCH=$sweep STRATA_OP_BENCH_TOKENS=128 timeout "${NCU_TIMEOUT:-200}" "$NCU" --csv --page raw \
    --clock-control none --metrics "$METRICS" --launch-count "${NCU_LAUNCHES:-400}" \
    bash -c "exec $BUILD/bin/cuda_op_bench > $OUT/ncu_${sweep}_bench.txt" > "$OUT/ncu_$sweep.csv" 2> "$OUT/ncu_${sweep}_err.txt"
  echo "ncu rc=$? ($(wc -l < "$OUT/ncu_$sweep.csv") lines)"
  python3 scripts/gpu/summarize_ncu_kernels.py "$OUT/ncu_$sweep.csv" 3
done
