#!/usr/bin/env bash
# Nsight Compute timings of the sampling kernel (kernels/cuda/sampling.cu) in the op bench's
# sampling sweep (STRATA_OP_BENCH=sampling): the kernel's own duration per mode and kind of
# logits, without the host's per-call work that the op bench's times include, at 1 and 128
# rows; then the warp stall reasons of one top-p launch on model-like logits at 1 row.
# Usage (repo root, on the GPU machine, after a build): bash scripts/gpu/ncu_sampling.sh [BUILD]
source "$(dirname "$0")/ncu_env.sh" "$@"
for rows in 1 128; do
  # The sweep runs each of its 9 (logits, mode) cases 203 times (3 warm-up + 20 x 10).
  STRATA_OP_BENCH=sampling STRATA_OP_BENCH_SAMPLING_ROWS=$rows timeout 240 "$NCU" --kernel-name "regex:SampleKernel" \
    --launch-count 1827 --metrics gpu__time_duration.sum --csv "$BUILD/bin/cuda_op_bench" > "$OUT/ncu_sampling_$rows.csv" 2>&1
  echo "ncu rows=$rows rc=$?"
  python3 - "$OUT/ncu_sampling_$rows.csv" "$rows" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, data = rows[0], rows[1:]
v = [float(r[-1].replace(',', '')) for r in data if r[head.index('Metric Name')] == 'gpu__time_duration.sum']
unit = data[0][head.index('Metric Unit')] if data else '?'
cases = [(k, m) for k in ('flat', 'peaked', 'tied') for m in ('temperature', 'top_p', 'top_k_top_p')]
for i, (k, m) in enumerate(cases):
    part = v[i * 203:(i + 1) * 203]
    if part:
        print('{"op":"SampleKernel","rows":%s,"logits":"%s","mode":"%s","median":%.1f,"unit":"%s","launches":%d}'
              % (sys.argv[2], k, m, statistics.median(part), unit, len(part)))
PY
done
STRATA_OP_BENCH=sampling STRATA_OP_BENCH_SAMPLING_ROWS=1 timeout 200 "$NCU" --kernel-name "regex:SampleKernel" \
  --launch-skip $((203 * 4 + 5)) --launch-count 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  "$BUILD/bin/cuda_op_bench" > "$OUT/ncu_sampling_stalls.txt" 2>&1
echo "ncu stalls rc=$?"
grep -E "Duration|Stall|Warp Cycles|Issued|Throughput|Registers" "$OUT/ncu_sampling_stalls.txt" | head -40
