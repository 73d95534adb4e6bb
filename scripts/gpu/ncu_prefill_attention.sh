#!/usr/bin/env bash
# Nsight Compute profile of the two prefill attention kernels on the 4,096-token prompt of
# the attention op cases (32 query heads on 8 KV heads of 128, one layer): where the Hopper
# wgmma kernel waits (docs/benchmarks.md runs 71-80: 610 vs FA2's 535 us, though with its
# K/V loads removed it runs in 357 us). Writes $OUT/ncu_<kernel>.txt and prints the lines
# that answer that: duration, throughputs, L2 hit rate, issue activity and warp stall reasons.
# With NCU_SOURCE=1 it profiles only the wgmma kernel, with warp-state sampling per SASS
# instruction, and prints the instructions where the warps stall most ($OUT/ncu_source.csv).
# Usage (repo root, on the GPU machine, after a build): bash scripts/gpu/ncu_prefill_attention.sh [BUILD]
source "$(dirname "$0")/ncu_env.sh" "$@"
if [ "${NCU_SOURCE:-0}" = 1 ]; then
  STRATA_CUDA_PREFILL_ATTENTION=wgmma STRATA_OP_BENCH=attention timeout 300 "$NCU" --kernel-name "regex:WgmmaPrefillKernel" \
    --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters --import-source no \
    -f -o "$OUT/ncu_wgmma_source" "$BUILD/bin/cuda_op_bench" > "$OUT/ncu_source_run.txt" 2>&1
  echo "ncu rc=$?"
  "$NCU" -i "$OUT/ncu_wgmma_source.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_source.csv" 2> "$OUT/ncu_source_err.txt"
  echo "source page rc=$? ($(wc -l < "$OUT/ncu_source.csv") lines)"
  head -c 600 "$OUT/ncu_source_err.txt"
  python3 scripts/gpu/summarize_ncu_source.py "$OUT/ncu_source.csv"
  exit 0
fi
for k in wgmma fa2; do
  name=$([ "$k" = wgmma ] && echo WgmmaPrefillKernel || echo Fa2PrefillKernel)
  echo "=== prefill_attention=$k ($name): the 4,096-token case"
  # The op bench runs the decode cases first (no prefill kernel), then times the 4,096-token
  # prompt several times: skip the first two launches of the kernel (warm-up), profile one.
  STRATA_CUDA_PREFILL_ATTENTION=$k STRATA_OP_BENCH=attention timeout 240 "$NCU" --kernel-name "regex:$name" \
    --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    "$BUILD/bin/cuda_op_bench" > "$OUT/ncu_$k.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "ERR_NVGPUCTRPERM|==ERROR==|==WARNING== No kernels" "$OUT/ncu_$k.txt" | head -3
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Hit Rate|L1/TEX Hit|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued|Registers Per Thread|Achieved Occupancy|Stall" \
    "$OUT/ncu_$k.txt" | head -40
done
