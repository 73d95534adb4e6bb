#!/usr/bin/env bash
# The GPU benchmarks alone (no tests), for a short run when the tests already passed on the
# same code: run_gpu.sh's "bench" phase (issue 3's Llama-3-8B-shape figures), building only
# the CLI and the CUDA plugin. Logs go to $OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
STRATA_GPU_TARGETS="strata strata-backend-cuda" exec bash "$ROOT/scripts/gpu/run_gpu.sh" bench "$@"
