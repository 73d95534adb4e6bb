#!/usr/bin/env bash
# A/B of batch-1 decode against a base commit on the same lent machine: lent H200s differ by
# 1-4% between machines on the same code, so a change of that size is only resolved when
# both builds run on one machine, alternately. On the build machine:
#   git archive --format=tar.gz -o .gpu/base.tar.gz <base-commit>
# then on the GPU machine (run_gpu.sh's `ab` phase calls this after building the head):
#   BUILD=build-gpu OUT=... bash scripts/gpu/ab_base.sh [ROUNDS]
# STRATA_AB_VARIANTS (space-separated VAR=value settings) adds runs of the head build with
# each setting in its environment, e.g. STRATA_AB_VARIANTS="STRATA_CUDA_PDL=gemv" (several
# settings of one run joined by commas: "A=1,B=2").
# STRATA_AB_ARGS replaces the benchmark (the arguments after `strata`; several separated by
# ";", each run in every round), e.g. the 128-sequence serving run.
# Prints one JSON line per run ({"build":"base"|"head"|"head VAR=value", "args":N, ...}).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
BUILD="${BUILD:-build-gpu}"
OUT="${OUT:-$ROOT/gpu-logs}"
ROUNDS="${1:-3}"
[ -f .gpu/base.tar.gz ] || { echo "ab: no .gpu/base.tar.gz (git archive of the base commit)"; exit 1; }
source scripts/gpu/deps_env.sh
BASE_SRC=/tmp/strata-base
rm -rf "$BASE_SRC" && mkdir -p "$BASE_SRC" && tar -C "$BASE_SRC" -xzf .gpu/base.tar.gz
cmake -S "$BASE_SRC" -B "$BASE_SRC/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$DEPS/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_CUDA_ARCHITECTURES="${STRATA_CUDA_ARCHS:-90a-real}" >/dev/null 2>&1
cmake --build "$BASE_SRC/build" -j16 --target strata strata-backend-cuda >/dev/null 2>&1 ||
  { echo "ab: base build failed"; exit 1; }
DEFAULT_ARGS="bench --synthetic llama3-8b --device cuda --json --prompt-tokens 128 --gen-tokens 128 -r 3"
IFS=';' read -r -a ARG_SETS <<< "${STRATA_AB_ARGS:-$DEFAULT_ARGS}"
for r in $(seq 1 "$ROUNDS"); do
  for a in "${!ARG_SETS[@]}"; do
    ARGS="${ARG_SETS[$a]}"
    res=$(timeout 150 "$BASE_SRC/build/bin/strata" $ARGS 2>/dev/null | tail -1)
    echo "{\"build\":\"base\",\"args\":$a,\"round\":$r,\"result\":$res}" | tee -a "$OUT/ab_base.jsonl"
    for v in head ${STRATA_AB_VARIANTS:-}; do
      if [ "$v" = head ]; then
        res=$(timeout 150 "$BUILD/bin/strata" $ARGS 2>/dev/null | tail -1)
      else
        res=$(env ${v//,/ } timeout 150 "$BUILD/bin/strata" $ARGS 2>/dev/null | tail -1)
      fi
      echo "{\"build\":\"$v\",\"args\":$a,\"round\":$r,\"result\":$res}" | tee -a "$OUT/ab_base.jsonl"
    done
  done
done
