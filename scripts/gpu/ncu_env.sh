# Sourced by the Nsight Compute scripts (scripts/gpu/ncu_*.sh) with their arguments: BUILD (the
# build folder, first argument, default build-gpu), OUT (the log folder, created) and NCU (the
# ncu binary; the script stops where there is none).
set -uo pipefail
BUILD="${1:-build-gpu}"
OUT="${OUT:-gpu-logs}"
mkdir -p "$OUT"
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
[ -x "$NCU" ] || { echo "ncu not found"; exit 1; }
