#!/usr/bin/env bash
# Per-kernel device time of decode steps, Llama-3-8B shape, bf16, with Nsight Compute (ncu
# on the GPU machine; it times each kernel alone, L2 flushed before each, clocks left as
# they are): batch-1 decode (the Generator path of `strata bench`, op by op so that every
# kernel is a launch) and the 128-sequence engine run. Prints the time per kernel name
# summed over the captured launches, and the sum. Usage: profile_kernels.sh [BUILD]
# ncu needs hardware counters: on the lent H200 under gVisor it captured nothing on
# 2026-11-30 (library/device KINDS.md: it works on the Firecracker machines); ncu's own
# messages are then in $OUT/ncu_*.err.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${1:-build-gpu}"
OUT="${OUT:-$ROOT/gpu-logs}"
NCU="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
[ -n "$NCU" ] || { echo "profile_kernels: no ncu on this machine"; exit 0; }
S="$BUILD/bin/strata bench --synthetic llama3-8b --device cuda --json --enforce-eager"

summarize() {  # ncu CSV on stdin -> per-kernel totals
  python3 -c '
import csv, sys, collections
rows = [r for r in csv.reader(l for l in sys.stdin if l.startswith("\""))]
if not rows: print("  no kernels captured (see the .err file)"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
  v = float(r[vi].replace(",", "")); u = r[ui]
  us = v / 1e3 if u == "nsecond" else v if u == "usecond" else v * 1e3 if u == "msecond" else v
  name = r[ki].split("(")[0].split("<")[0][:60]; tot[name] += us; cnt[name] += 1
for n, t in sorted(tot.items(), key=lambda x: -x[1]): print(f"  {t:10.1f} us  {cnt[n]:5d} x  {n}")
print(f"  {sum(tot.values()):10.1f} us  total over {sum(cnt.values())} kernels")'
}

echo "--- batch-1 decode: one step's kernels (prompt 128, the 6th generated token)"
# A step of the 8B shape is 32 layers x 9-10 kernels + head; skip the prefill and the first steps.
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 2200 --launch-count 296 \
  $S --prompt-tokens 128 --gen-tokens 12 -r 1 2>"$OUT/ncu_decode1.err" | tee "$OUT/ncu_decode1.csv" | summarize
echo "--- 128 concurrent sequences: one decode step's kernels"
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 6000 --launch-count 320 \
  $S --num-requests 128 --prompt-len-min 128 --prompt-len-max 128 --output-len-min 24 --output-len-max 24 \
  --max-num-seqs 128 --max-batched-tokens 8192 2>"$OUT/ncu_decode128.err" | tee "$OUT/ncu_decode128.csv" | summarize
