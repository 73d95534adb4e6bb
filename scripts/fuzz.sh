#!/usr/bin/env bash
# Fuzzes one target of tests/fuzz with libFuzzer, AddressSanitizer and UBSan:
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
# TARGET: request chat_template gguf llama2c hf_checkpoint tokenizer_json.
# Builds with clang 15 in build-fuzz/ (its own build dir; needs Debian's clang-15, whose
# libclang-common-15-dev has libFuzzer, and libomp-15-dev for the CPU backend's OpenMP; CI
# installs neither: it only replays the corpus, built with gcc).
# Clang 14 cannot build strata: it has no _Float16 on x86-64 (core/common/half.h).
# Starts from the checked-in seeds (tests/fuzz/corpus/TARGET, read only) and keeps what it
# finds in build-fuzz/corpus/TARGET; crashes land in build-fuzz/artifacts/TARGET/. A crash
# that is fixed goes into tests/fuzz/corpus/TARGET/ so that CI replays it from then on.
# Prints the final libFuzzer figures as one JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: $0 TARGET SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
TARGET=$1
SECONDS_TO_RUN=$2
shift 2
if [ ! -d "tests/fuzz/corpus/$TARGET" ]; then
  echo "unknown target '$TARGET'; one of: $(ls tests/fuzz/corpus | tr '\n' ' ')" >&2
  exit 2
fi
CXX=${STRATA_FUZZ_CXX:-clang++-15}
CC=${STRATA_FUZZ_CC:-clang-15}
if ! command -v "$CXX" >/dev/null; then
  echo "fuzz: $CXX not found (apt-get install clang-15 libomp-15-dev)" >&2
  exit 1
fi
BUILD=${STRATA_FUZZ_BUILD_DIR:-build-fuzz}
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
# UBSan findings abort (a report that only prints would not count as a crash).
FLAGS="-fno-sanitize-recover=undefined -fno-sanitize=vptr,function"
# STRATA_FUZZ_NO_BUILD=1: use the binary as built (e.g. while another target builds).
if [ -z "${STRATA_FUZZ_NO_BUILD:-}" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_C_FLAGS="$FLAGS" \
    -DSTRATA_FUZZ=ON -DSTRATA_SANITIZE=address,undefined -DSTRATA_BUILD_BENCH=OFF >/dev/null
  cmake --build "$BUILD" -j "${STRATA_JOBS:-$(nproc)}" --target "fuzz_$TARGET"
fi

CORPUS="$BUILD/corpus/$TARGET"
ARTIFACTS="$BUILD/artifacts/$TARGET"
LOG="$BUILD/logs/$TARGET-$(date -u +%Y%m%dT%H%M%SZ).log"
mkdir -p "$CORPUS" "$ARTIFACTS" "$(dirname "$LOG")"
DICT=()
[ -f "tests/fuzz/dict/$TARGET.dict" ] && DICT=(-dict="tests/fuzz/dict/$TARGET.dict")
before=$(find "$ARTIFACTS" -type f | wc -l)
echo "fuzz: $TARGET for ${SECONDS_TO_RUN}s; log $LOG" >&2
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  "$BUILD/bin/fuzz_$TARGET" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" "${DICT[@]}" "$@" \
  "$CORPUS" "tests/fuzz/corpus/$TARGET" >"$LOG" 2>&1
RC=$?
set -e
tail -n 25 "$LOG" >&2
# The last status line ("#N DONE cov: C ft: F corp: K/S ... exec/s: E") and the final stats.
last=$(grep -E '^#[0-9]+' "$LOG" | tail -n 1 || true)
num() { sed -nE "s|.*$1 ([0-9]+).*|\\1|p" <<<"$last"; }
execs=$(grep -E '^stat::number_of_executed_units' "$LOG" | awk '{print $2}' | tail -n 1)
crashes=$(($(find "$ARTIFACTS" -type f | wc -l) - before))
printf '{"target":"%s","seconds":%s,"rc":%d,"execs":%s,"exec_per_s":%s,"cov":%s,"ft":%s,"corpus":%s,"new_artifacts":%d,"log":"%s"}\n' \
  "$TARGET" "$SECONDS_TO_RUN" "$RC" "${execs:-0}" "$(num 'exec/s:' || true)" "$(num 'cov:' || true)" \
  "$(num 'ft:' || true)" "$(num 'corp:' || true)" "$crashes" "$LOG"
exit $RC
