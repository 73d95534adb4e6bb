#!/usr/bin/env bash
# One device call, many phases, each under its own hard timeout: builds once (run_gpu.sh build),
# then runs every PHASE:SECONDS of the list with `timeout -k 5`, packing $OUT/all.tgz after each
# phase (the results so far, plus the text files of the phases' /tmp/strata-* work folders), so a
# phase that hangs costs its own seconds, not the call, and what ran still comes back.
# Usage (repo root, on the GPU machine, OUT set by the device tool):
#   bash scripts/gpu/run_phases.sh "phase:seconds phase:seconds ..." "build targets" [total-seconds]
# Budget env vars of the phases (e.g. CUDA_B1_BUDGET) pass through. Needs .gpu (carry it).
set -u
REAL_OUT=${OUT:?OUT (the folder whose files come back) must be set}
export O=/tmp/run-phases-out; rm -rf $O; mkdir -p $O
T0=$(date +%s); TOTAL=${3:-540}
pack() {
  mkdir -p $O/work
  for d in /tmp/strata-*; do
    [ -d "$d" ] && find "$d" -maxdepth 2 -name '*.txt' -size -2M -exec cp --parents {} $O/work/ \;
  done 2>/dev/null
  tar czf "$REAL_OUT/all.tgz" -C $O . 2>/dev/null
}
OUT=$O STRATA_GPU_TARGETS="$2" timeout -k 5 300 bash scripts/gpu/run_gpu.sh build > /dev/null 2>&1
echo "build took $(( $(date +%s) - T0 ))s" >> $O/call.txt
for pt in $1; do
  p=${pt%%:*}; t=${pt#*:}
  left=$(( TOTAL - ($(date +%s) - T0) - 8 ))
  [ $left -lt 10 ] && { echo "SKIPPED $p (no time left)" >> $O/call.txt; continue; }
  [ "$t" -gt $left ] && t=$left
  s=$(date +%s)
  OUT=$O STRATA_GPU_TARGETS="$2" timeout -k 5 "$t" bash scripts/gpu/run_gpu.sh "$p" > /dev/null 2>&1
  echo "$p rc=$? took $(( $(date +%s) - s ))s of $t" >> $O/call.txt
  pack
done
pack
cat $O/call.txt
grep -E "^=== " $O/run_gpu.log | tail -30
