#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) on the build machine for a run on the GPU machine, which has
# nvcc/cuBLAS/CMake/ninja but no Debian -dev packages and no network:
#   .gpu/debs/    apt-get download'ed .deb files of the build dependencies (unpacked there
#                 with dpkg -x by run_gpu.sh; never installed)
#   .gpu/shared/  a copy of the small models the tests read (../shared does not travel)
# Usage: scripts/gpu/prepare.sh        (from anywhere; ~30 MiB)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SHARED="${STRATA_SHARED_DIR:-$ROOT/../shared}"
OUTDIR="$ROOT/.gpu"
mkdir -p "$OUTDIR/debs" "$OUTDIR/shared/models"

# Build-time headers/CMake configs plus the runtime .so packages they point at.
PKGS=(
  libabsl-dev libabsl20220623
  nlohmann-json3-dev
  libdnnl-dev libdnnl2
  libhwy-dev libhwy1
  libxxhash-dev libxxhash0
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libgtest-dev
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev libbrotli-dev libbrotli1
  libgmock-dev
  pkgconf-bin libpkgconf3
  ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers  # the OpenCL backend (phase opencl)
)
cd "$OUTDIR/debs"
for p in "${PKGS[@]}"; do
  if ! ls "${p}"_*.deb >/dev/null 2>&1; then
    apt-get download "$p" 2>&1 | grep -v "unsandboxed as root" || true
    ls "${p}"_*.deb >/dev/null 2>&1 || echo "warning: could not download $p"
  fi
done

# Models: stories260K and hf-tiny (small), tokenizers if present and small.
copy() { rm -rf "$2/$(basename "$1")"; cp -a "$1" "$2/"; }
copy "$SHARED/models/stories260K" "$OUTDIR/shared/models"
copy "$SHARED/models/hf-tiny" "$OUTDIR/shared/models"
# Tokenizer files are large JSON (22 MiB) but compress ~10x: run_gpu.sh unpacks them into
# .gpu/shared/tokenizers on the GPU machine.
if [ -d "$SHARED/tokenizers" ]; then
  tar -C "$SHARED" -cJf "$OUTDIR/tokenizers.tar.xz" tokenizers
fi
du -sh "$OUTDIR"
