#!/usr/bin/env bash
# Configures and builds strata into build/ (or $STRATA_BUILD_DIR). Extra args go to cmake's
# configure step; STRATA_TARGETS (space-separated) limits what is built.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${STRATA_BUILD_DIR:-build}
JOBS=${STRATA_JOBS:-$(nproc)}
# ccache hits across clones in other folders (CI clones afresh each run).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${STRATA_BUILD_TYPE:-Release} "$@" >/dev/null
if [ -n "${STRATA_TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$JOBS" --target $STRATA_TARGETS
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
