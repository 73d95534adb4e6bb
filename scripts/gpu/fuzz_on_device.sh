#!/usr/bin/env bash
# Runs the libFuzzer targets (issue 25) on the GPU machine's spare CPU cores while a GPU phase
# runs: the build machine has 2 shared cores, the GPU machine 16 that the GPU phases leave idle.
# The binaries are the clang 15 ASan+UBSan builds of scripts/fuzz.sh, stripped, packed with the
# shared libraries they need (ldd) into .gpu/fuzz.tar.xz on the build machine:
#   scripts/gpu/pack_fuzzers.sh
# Usage (repo root, GPU machine):
#   scripts/gpu/fuzz_on_device.sh start SECONDS [WORKERS_PER_TARGET] [TARGET[:WORKERS]...]   (returns at once)
#   scripts/gpu/fuzz_on_device.sh finish     (waits for the fuzzers; figures and new corpus to $OUT)
# Each target runs libFuzzer's fork mode with WORKERS_PER_TARGET workers (default 2), from the
# checked-in seeds plus the corpus an earlier call brought back (.gpu/fuzz_corpus_TARGET.tar.xz).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-logs}"
F=/tmp/strata-fuzz
mode=${1:-}; shift || true
if [ "$mode" = start ]; then
  secs=$1; workers=${2:-2}; shift 2 || shift $#
  targets=${*:-chat_template tokenizer_json gguf llama2c hf_checkpoint}
  rm -rf "$F"; mkdir -p "$F" "$OUT/fuzz"
  tar -C "$F" -xJf .gpu/fuzz.tar.xz
  for tw in $targets; do
    # TARGET:WORKERS gives one target its own worker count (the targets' rates differ 3x).
    t=${tw%%:*}; w=$workers; [ "$tw" != "$t" ] && w=${tw#*:}
    mkdir -p "$F/corpus/$t" "$OUT/fuzz/artifacts/$t"
    [ -f ".gpu/fuzz_corpus_$t.tar.xz" ] && tar -C "$F/corpus" -xJf ".gpu/fuzz_corpus_$t.tar.xz"
    dict=(); [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="tests/fuzz/dict/$t.dict")
    echo "$t" >> "$F/targets"
    LD_LIBRARY_PATH="$F/fuzz/lib" ASAN_OPTIONS=detect_leaks=1 nice -n 5 \
      "$F/fuzz/bin/fuzz_$t" -fork="$w" -ignore_crashes=1 -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/fuzz/artifacts/$t/" "${dict[@]}" \
      "$F/corpus/$t" "tests/fuzz/corpus/$t" > "$OUT/fuzz/$t.log" 2>&1 &
    echo $! >> "$F/pids"
  done
  echo "fuzz: started $(wc -l < "$F/targets") targets x $workers workers for ${secs}s"
elif [ "$mode" = finish ]; then
  [ -f "$F/pids" ] || { echo "fuzz: nothing started"; exit 0; }
  for p in $(cat "$F/pids"); do wait "$p" 2>/dev/null || while kill -0 "$p" 2>/dev/null; do sleep 2; done; done
  for t in $(cat "$F/targets"); do
    # Fork mode's status lines: "#EXECS: cov: C ft: F corp: N exec/s: E oom/timeout/crash: a/b/c time: Ts ..."
    last=$(grep -E "^#[0-9]+" "$OUT/fuzz/$t.log" | tail -1)
    crashes=$(find "$OUT/fuzz/artifacts/$t" -type f | wc -l)
    echo "fuzz $t: ${last:-no status line} | artifacts: $crashes"
    tar -C "$F/corpus" -cJf "$OUT/fuzz_corpus_$t.tar.xz" "$t"
  done
else
  echo "usage: $0 start SECONDS [WORKERS] [TARGETS...] | finish" >&2; exit 2
fi
